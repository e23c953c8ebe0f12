"""A stream cut into pieces read at once gives what one sequential read gives, or is read again whole.

Ground truth is the sequential read (itself checked against the fixtures' truth files elsewhere) and the
generator's own per-flow counts; the seam checks are shown to matter on captures where a naive join of
fresh-state pieces would count retransmissions wrongly.
"""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from analyze import engine, pieces
from analyze import layouts as L
from analyze.flows import fold_scans, merge_host
from analyze.formats import is_capture
from analyze.scan import StreamScan, scan_range, scan_stream
from expect import FIXTURES, same_scan
from tests.benchmarks.synth import ring_capture

OPTS = dict(bin_ns=1_000_000, byte_mode=0)
FILES = sorted(p for d in ("formats", "linktypes", "accounting", "bad") for p in (FIXTURES / d).iterdir()
               if is_capture(p)) + sorted((FIXTURES / "example").glob("*/*.pcap"))


def _pieces(paths: list[Path], piece_bytes: int) -> tuple[list[pieces.Piece], list[StreamScan]]:
    """The stream planned into pieces of about piece_bytes, each read with fresh state (in this process)."""
    plan = pieces.plan([paths], [sum(p.stat().st_size for p in paths)], workers=1 << 30, min_piece_bytes=piece_bytes)[0]
    assert plan is not None, f"{paths[0].name} was not split"
    return plan, [scan_range(p.path, p.start, p.end, **OPTS) for p in plan]


def test_every_fixture_cut_every_few_records_joins_or_is_refused_never_wrong() -> None:
    """Pieces of a record or two (the small fixtures) or a sixteenth (the example's captures): where the
    join is accepted it equals the sequential read; where it is refused, re-reading whole does. Clean
    captures must be accepted; pcapng and gzip are never cut."""
    joined, refused = [], []
    for path in FILES:
        if path.suffix != ".pcap":
            assert pieces.plan([[path]], [path.stat().st_size], 1 << 30, min_piece_bytes=1)[0] is None, path
            continue
        plan, parts = _pieces([path], max(100, path.stat().st_size // 16))
        got = pieces.join(plan, parts)
        want = scan_stream([path], **OPTS)
        (joined if got is not None else refused).append(path.name)
        same_scan(got if got is not None else scan_stream([path], **OPTS), want)
    assert {"eth0.pcap", "pcap-us-le.pcap", "linux-sll2.pcap", "tso-headers-only.pcap"} <= set(joined), joined
    assert {"reordered.pcap", "retransmissions.pcap", "fragments.pcap"} <= set(refused), refused


@pytest.mark.parametrize("name", ["reordered.pcap", "retransmissions.pcap"])
def test_a_naive_join_would_miscount_retransmissions(name: str) -> None:
    """Why the seam check exists: folding fresh-state pieces without it gets the retransmitted bytes wrong."""
    path = FIXTURES / "accounting" / name
    plan, parts = _pieces([path], 100)
    naive = fold_scans(parts)[1][:, L.AGG_RETRANS_BYTES].sum()
    truth = merge_host("h", [scan_stream([path], **OPTS)]).agg[:, L.AGG_RETRANS_BYTES].sum()
    assert naive != truth and pieces.join(plan, parts) is None


def test_a_ring_capture_in_pieces_joins_exactly(tmp_path: Path) -> None:
    """A clean 60 k-packet ring capture in ~10 pieces: every seam holds, and the flows are the generator's."""
    path = tmp_path / "ring.pcap"
    truth = ring_capture(path, packets=60_000, conns=4)
    plan, parts = _pieces([path], path.stat().st_size // 10)
    assert len(plan) >= 8 and plan[0].start == 24 and plan[-1].end == path.stat().st_size
    got = pieces.join(plan, parts)
    assert got is not None
    same_scan(got, scan_stream([path], **OPTS))
    assert sorted(merge_host("h", [got]).agg[:, L.AGG_IP_BYTES].tolist()) == sorted(truth.ip_bytes.tolist())


def test_a_damaged_record_hiding_a_seam_is_read_again_whole(tmp_path: Path) -> None:
    """A record header damaged just before a cut: the piece before it cannot end on the cut, so the join
    is refused; a damaged header inside a piece resyncs there and the join still equals one pass."""
    path = tmp_path / "ring.pcap"
    ring_capture(path, packets=20_000, conns=2)
    data = bytearray(path.read_bytes())
    plan = pieces.plan([[path]], [len(data)], 1 << 30, min_piece_bytes=len(data) // 4)[0]
    cut = plan[2].start
    before = _record_before(data, cut)
    data[before + 8:before + 12] = struct.pack("<I", 0x7FFFFFF0)  # caplen far past the cut
    path.write_bytes(bytes(data))
    plan, parts = _pieces([path], len(data) // 4)
    assert [p.start for p in plan][2] == cut and pieces.join(plan, parts) is None
    want = scan_stream([path], **OPTS)
    assert any("corrupt record header" in w for w in want.files[0].warnings)
    same_scan(engine.scan_streams([[path]], engine.ScanOptions(bin_ns=1_000_000, byte_mode=0), workers=1)[0], want)


def _record_before(data: bytearray, offset: int) -> int:
    """Offset of the classic pcap record that ends at `offset` (walking from the first record)."""
    pos = 24
    while True:
        nxt = pos + 16 + struct.unpack_from("<I", data, pos + 8)[0]
        if nxt == offset:
            return pos
        pos = nxt


def test_the_pool_reads_one_big_file_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One host's capture and two workers: the file is cut into pieces, read at once, and the result equals
    the sequential read and the generator's counts; a rotation set of two files is cut at the rotation."""
    monkeypatch.setattr(engine, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pieces, "MIN_PIECE_BYTES", 1 << 20)
    one = tmp_path / "one.pcap"
    truth = ring_capture(one, packets=100_000, conns=4)
    rot = [tmp_path / "rot0.pcap", tmp_path / "rot1.pcap"]
    ring_capture(rot[0], packets=30_000, conns=4, seed=1)
    ring_capture(rot[1], packets=30_000, conns=4, seed=2, start_ns=1_763_000_100_000_000_000)
    streams = [[one], rot]
    sizes = [one.stat().st_size, sum(p.stat().st_size for p in rot)]
    plans = pieces.plan(streams, sizes, 2)
    assert len(plans[0]) == 3 and [p.path for p in plans[1]] == rot  # pieces of about a quarter of all bytes
    opts = engine.ScanOptions(bin_ns=1_000_000, byte_mode=0)
    pooled = engine.scan_streams(streams, opts, workers=2)
    for got, paths in zip(pooled, streams):
        same_scan(got, scan_stream(paths, **OPTS))
    assert merge_host("h", [pooled[0]]).agg[:, L.AGG_IP_BYTES].sum() == truth.ip_bytes.sum()
