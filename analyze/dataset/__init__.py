"""The run as a Parquet dataset (`ringscope convert`): written once, queried by DuckDB, Polars or pandas, and
analyzed again without the pcaps.

manifest names the dataset's parts and recognises one; columns turns packet rows and stream scans into Arrow
tables and back; convert reads the captures (a host per task, in a local pool or on a Dask cluster) and writes
them; load turns a dataset back into the per-host scans an analysis starts from, so `analyze OUT` gives what
analyzing the pcaps gives.
"""
