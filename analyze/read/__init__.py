"""The read path: capture files -> one scan (flow table, series cells, file health) per host stream.

Formats are sniffed by magic bytes (formats), walked and decoded by the compiled kernel (kernel, built ahead
of time by compiled; column layouts in layouts), resynchronised after damage (resync), split into pieces for
parallel reading (pieces) and run in a local process pool (engine) or on a Dask cluster (cluster); inputs finds
the hosts' files and reading starts it all. numpy only: pandas is never imported here (the CLI imports it
while a pool reads), a rule pyproject.toml's import contracts check.
"""
