"""The read path: capture files -> one scan (flow table, series cells, file health) per host stream.

Formats are sniffed by magic bytes (formats), gzip and zstd inflated beside the scan (inflate), walked and decoded
by the compiled kernel (kernel, built ahead of time by compiled; column layouts in layouts), resynchronised after
damage (resync), split into pieces for parallel reading (pieces) and run in a local process pool (engine) or on a
Dask cluster (cluster), which share the progress callback and hand-out order (work); inputs finds the hosts' files
and reading starts it all (a Parquet dataset is read back one layer up, analyze.source). With a rows sink
(`ringscope convert`), the kernel also writes each IP packet's header fields as a row (layouts.ROW_*). Packets dated
far outside their capture's span are set aside after the read (outliers); scan.Follow reads files as they grow (a
live view). numpy only: pandas is never imported here (the CLI imports it while a pool reads), a rule
pyproject.toml's import contracts check.
"""
