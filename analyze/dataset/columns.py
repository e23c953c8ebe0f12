"""Arrow tables of the dataset, from the read path's arrays and back, column by column (no per-packet Python).

Packet rows become typed, readable columns (addresses as text, absent TCP fields as nulls). A stream scan's
tables keep every counter the analysis uses, bit for bit, so a scan read back is the scan that was written:
flows carry their exact 40-byte key beside the readable address and port columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from analyze.tables.flows import address_text, key_ports, proto_name
from analyze.read import layouts as L
from analyze.read.scan import FileHealth, StreamScan

_PACE = {"AGG_PACE_BYTES": "pace_bytes", "AGG_PACE_NS": "pace_ns"}  # blocks of PACE_BINS columns, one name a bin
AGG_NAMES = sorted(
    [(v, k[4:].lower()) for k, v in vars(L).items() if k.startswith("AGG_") and k not in _PACE]
    + [(getattr(L, k) + i, f"{name}_{i}") for k, name in _PACE.items() for i in range(L.PACE_BINS)]
)
KIND_COLUMNS = [f"kind_{name}" for name in L.KIND_NAMES]

ADDRESS_COLUMNS = ("src", "dst")  # the columns Parquet stores dictionary-encoded (the others encode faster plain)
PACKET_SCHEMA = pa.schema(
    [
        ("time_ns", pa.int64()),
        ("src", pa.string()),
        ("dst", pa.string()),
        ("sport", pa.uint16()),
        ("dport", pa.uint16()),
        ("proto", pa.uint8()),
        # lengths are int64, not uint32, so that a sum over a host stays exact in tools that keep the column's type
        # (Polars sums a uint32 column into a uint32: 4.3 GB and it wraps)
        ("frame_bytes", pa.int64()),
        ("ip_bytes", pa.int64()),
        ("payload_bytes", pa.int64()),
        ("tcp_flags", pa.uint8()),
        ("seq", pa.uint32()),
        ("ack", pa.uint32()),
        ("tcp_window", pa.uint16()),  # "window" is a keyword in SQL
        ("fragment", pa.bool_()),
        # an RDMA packet's BTH (proto 27, "roce"): destination QP, opcode, PSN; null for other packets
        ("qp", pa.uint32()),
        ("opcode", pa.uint8()),
        ("psn", pa.uint32()),
    ]
)


def _addresses(hi: np.ndarray, lo: np.ndarray) -> pa.Array:
    """Text of 128-bit address keys: the 16-byte keys hashed into a dictionary by Arrow, each distinct address
    formatted once (a block holds a handful), then gathered. Plain strings, not an Arrow dictionary column:
    each block would have its own dictionary, which Arrow's own group-by refuses to unify across row groups."""
    pairs = np.ascontiguousarray(np.stack([hi.view(np.uint64), lo.view(np.uint64)], axis=1))
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(pairs), [None, pa.py_buffer(pairs)])
    encoded = keys.dictionary_encode()
    words = np.frombuffer(encoded.dictionary.buffers()[1], dtype=np.uint64)[: 2 * len(encoded.dictionary)]
    texts = pa.array([address_text(int(a), int(b)) for a, b in words.reshape(-1, 2)], type=pa.string())
    return texts.take(encoded.indices)


def _absent_below_zero(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """Non-negative values as KIND, -1 (the kernel's 'none') as null."""
    missing = values < 0
    return pa.array(np.where(missing, 0, values).astype(kind.to_pandas_dtype()), type=kind, mask=missing)


def packets_table(rows: np.ndarray) -> pa.Table:
    """A block of kernel packet rows (int64[n, layouts.N_ROW]) as the packets table."""
    r = rows
    columns = [
        pa.array(r[:, L.ROW_NS]),
        _addresses(r[:, L.ROW_SRC_HI], r[:, L.ROW_SRC_LO]),
        _addresses(r[:, L.ROW_DST_HI], r[:, L.ROW_DST_LO]),
        pa.array(r[:, L.ROW_SPORT].astype(np.uint16)),
        pa.array(r[:, L.ROW_DPORT].astype(np.uint16)),
        pa.array(r[:, L.ROW_PROTO].astype(np.uint8)),
        pa.array(r[:, L.ROW_FRAME_BYTES]),
        pa.array(r[:, L.ROW_IP_BYTES]),
        pa.array(r[:, L.ROW_PAYLOAD_BYTES]),
        pa.array(r[:, L.ROW_FLAGS].astype(np.uint8)),
        _absent_below_zero(r[:, L.ROW_SEQ], pa.uint32()),
        _absent_below_zero(r[:, L.ROW_ACK], pa.uint32()),
        _absent_below_zero(r[:, L.ROW_WINDOW], pa.uint16()),
        pa.array(r[:, L.ROW_FRAGMENT] != 0),
        _absent_below_zero(r[:, L.ROW_QP], pa.uint32()),
        _absent_below_zero(r[:, L.ROW_OPCODE], pa.uint8()),
        _absent_below_zero(r[:, L.ROW_PSN], pa.uint32()),
    ]
    return pa.Table.from_arrays(columns, schema=PACKET_SCHEMA)


def flows_table(scan: StreamScan) -> pa.Table:
    """A host's flows: index, readable key, exact key, and every aggregate column under its layouts name."""
    keys = scan.keys
    ports = keys[:, 4].astype(np.int64) if len(keys) else np.zeros(0, np.int64)
    proto = (ports & 0xFF).astype(np.uint8)
    sport, dport, qp = key_ports(ports)
    columns: dict[str, Any] = {
        "flow": pa.array(np.arange(len(keys), dtype=np.int32)),
        "src": _addresses(keys[:, 0].view(np.int64), keys[:, 1].view(np.int64)),
        "dst": _addresses(keys[:, 2].view(np.int64), keys[:, 3].view(np.int64)),
        "sport": pa.array(sport.astype(np.uint16)),
        "dport": pa.array(dport.astype(np.uint16)),
        "qp": pa.array(qp.astype(np.int32)),  # a queue pair's destination QP, -1 for other flows
        "proto": pa.array(proto),
        "protocol": pa.array([proto_name(int(p)) for p in proto], type=pa.string()),
        "flow_key": pa.array([k.tobytes() for k in np.ascontiguousarray(keys)], type=pa.binary(40)),
    }
    for col, name in AGG_NAMES:
        columns[name] = pa.array(scan.agg[:, col])
    return pa.table(columns)


def flow_bins_table(scan: StreamScan, bin_ns: int) -> pa.Table:
    """A host's series cells: bytes of one flow in one time bin (the bin's start on the capture's clock)."""
    return pa.table(
        {
            "flow": pa.array(scan.cell_flow.astype(np.int32)),
            "bin_start_ns": pa.array(scan.cell_bin.astype(np.int64) * bin_ns),
            "bytes": pa.array(scan.cell_bytes.astype(np.int64)),
        }
    )


def samples_table(scan: StreamScan) -> pa.Table:
    """A host's sequence samples as the kernel packed them (layouts.SAMPLE_*), flow split out for joins."""
    key = scan.samples[:, L.SAMPLE_KEY]
    return pa.table(
        {
            "flow": pa.array((key >> L.SAMPLE_FLOW_SHIFT).astype(np.int32)),
            "sample_key": pa.array(key),
            "time_ns": pa.array(scan.samples[:, L.SAMPLE_NS]),
        }
    )


def files_table(files: list[FileHealth]) -> pa.Table:
    """A host's capture files and their health; jumps (records dated far from the one before) row-major."""
    columns: dict[str, Any] = {
        "path": [f.path for f in files],
        "format": [f.format for f in files],
        "linktypes": pa.array([f.linktypes for f in files], type=pa.list_(pa.string())),
        "file_bytes": pa.array([f.file_bytes for f in files], type=pa.int64()),
        "records": pa.array([f.records for f in files], type=pa.int64()),
        "captured_bytes": pa.array([f.captured_bytes for f in files], type=pa.int64()),
        "first_ns": pa.array([f.first_ns for f in files], type=pa.int64()),
        "last_ns": pa.array([f.last_ns for f in files], type=pa.int64()),
        "warnings": pa.array([f.warnings for f in files], type=pa.list_(pa.string())),
        "jumps_seen": pa.array([f.jumps_seen for f in files], type=pa.int64()),
        "jumps": pa.array([f.jumps.ravel().tolist() for f in files], type=pa.list_(pa.int64())),
    }
    for i, name in enumerate(KIND_COLUMNS):
        columns[name] = pa.array([int(f.kinds[i]) for f in files], type=pa.int64())
    return pa.table(columns)


def stream_scan(flows: pa.Table, bins: pa.Table, samples: pa.Table, files: pa.Table, bin_ns: int) -> StreamScan:
    """The stream scan the four tables were made from (flows_table, flow_bins_table, samples_table, files_table)."""
    n = flows.num_rows
    keys = np.frombuffer(b"".join(flows.column("flow_key").to_pylist()), dtype=np.uint64).reshape(n, 5).copy()
    agg = np.zeros((n, L.N_AGG), dtype=np.int64)
    present = set(flows.column_names)
    for col, name in AGG_NAMES:
        if name in present:  # a dataset written before a counter existed reads it as 0 (the group and pace
            agg[:, col] = flows.column(name).to_numpy()  # columns: no burst rate, the bins' alone)
    sample_rows = np.zeros((samples.num_rows, L.N_SAMPLE), dtype=np.int64)
    sample_rows[:, L.SAMPLE_KEY] = samples.column("sample_key").to_numpy()
    sample_rows[:, L.SAMPLE_NS] = samples.column("time_ns").to_numpy()
    f = files.to_pydict()
    health = [
        FileHealth(
            path=f["path"][i],
            format=f["format"][i],
            linktypes=f["linktypes"][i],
            file_bytes=f["file_bytes"][i],
            records=f["records"][i],
            captured_bytes=f["captured_bytes"][i],
            first_ns=f["first_ns"][i],
            last_ns=f["last_ns"][i],
            kinds=np.array([f[c][i] for c in KIND_COLUMNS], dtype=np.int64),
            warnings=f["warnings"][i],
            jumps=np.array(f["jumps"][i], dtype=np.int64).reshape(-1, L.N_JUMP),
            jumps_seen=f["jumps_seen"][i],
        )
        for i in range(files.num_rows)
    ]
    return StreamScan(
        files=health,
        keys=keys,
        agg=agg,
        cell_flow=bins.column("flow").to_numpy().astype(np.int32),
        cell_bin=bins.column("bin_start_ns").to_numpy() // bin_ns,
        cell_bytes=bins.column("bytes").to_numpy().astype(np.int64),
        samples=sample_rows,
    )
