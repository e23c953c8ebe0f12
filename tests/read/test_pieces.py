"""A stream cut into pieces read at once gives what one sequential read gives, or is read again whole.

Ground truth is the sequential read (itself checked against the fixtures' truth files elsewhere) and the
generator's own per-flow counts; the seam checks are shown to matter on captures where a naive join of
fresh-state pieces would count retransmissions wrongly.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from analyze.read import engine
from analyze.read import pieces
from analyze.read import layouts as L
from analyze.read.fold import fold_scans, merge_host
from analyze.read.formats import is_capture, scan_bytes
from analyze.read.scan import StreamScan, scan_range, scan_stream
from tests.support.expect import FIXTURES, same_scan
from tests.support.pcapgen import BASE_NS, ETHERNET, LINKTYPE_ETHERNET, Flow, ip_packet, pcap_bytes, write
from tests.benchmarks.synth import ring_capture

OPTS = dict(bin_ns=1_000_000, byte_mode=0)
FILES = sorted(
    p for d in ("formats", "linktypes", "accounting", "bad") for p in (FIXTURES / d).iterdir() if is_capture(p)
) + sorted((FIXTURES / "example").glob("*/*.pcap"))


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
    naive = fold_scans(parts).agg[:, L.AGG_RETRANS_BYTES].sum()
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


def test_a_damaged_record_hiding_a_seam_is_read_again_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record header damaged just before a cut: the piece before it cannot end on the cut, the join is
    refused, and the pool reads the stream again whole, giving the sequential result and its warning."""
    path = tmp_path / "ring.pcap"
    ring_capture(path, packets=20_000, conns=2)
    data = bytearray(path.read_bytes())
    cut = pieces.plan([[path]], [len(data)], 1 << 30, min_piece_bytes=len(data) // 4)[0][2].start
    before = _record_before(data, cut)
    data[before + 8 : before + 12] = struct.pack("<I", 0x7FFFFFF0)  # caplen far past the cut
    path.write_bytes(bytes(data))
    plan, parts = _pieces([path], len(data) // 4)
    assert plan[2].start == cut and not parts[1].joinable and pieces.join(plan, parts) is None
    want = scan_stream([path], **OPTS)
    assert any("corrupt record header" in w for w in want.files[0].warnings)
    same_scan(_pooled([path], monkeypatch, len(data) // 4), want)


@pytest.mark.parametrize("piece, joined", [(0, True), (2, False)])
def test_damage_inside_a_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int, joined: bool) -> None:
    """A damaged header inside the first piece resyncs as a sequential read would (the join holds); inside a
    later piece the search for the next record knows fewer timestamps, so that piece is not joinable."""
    path = tmp_path / "ring.pcap"
    ring_capture(path, packets=20_000, conns=2)
    data = bytearray(path.read_bytes())
    plan = pieces.plan([[path]], [len(data)], 1 << 30, min_piece_bytes=len(data) // 4)[0]
    inside = _record_before(data, _record_after(data, (plan[piece].start + plan[piece].end) // 2))
    data[inside + 8 : inside + 12] = struct.pack("<I", 0x7FFFFFF0)
    path.write_bytes(bytes(data))
    plan, parts = _pieces([path], len(data) // 4)
    want = scan_stream([path], **OPTS)
    assert any("corrupt record header" in w for w in want.files[0].warnings)
    got = pieces.join(plan, parts)
    assert (got is not None) == joined
    if got is not None:
        same_scan(got, want)
    same_scan(_pooled([path], monkeypatch, len(data) // 4), want)


def test_a_clock_stepping_back_over_a_seam_cannot_fill_an_old_hole_unseen(tmp_path: Path) -> None:
    """A hole opens, the next piece continues the sequence 1.5 s later, then the clock steps back and a
    segment fills the hole 0.5 ms after it opened: reordering to a sequential read, so the join is refused
    (a fresh piece would count it as retransmitted)."""
    flow = Flow("10.9.0.1", "10.9.0.2", 4000, 5000, "tcp")
    t0 = BASE_NS + 10_000_000_000
    frames = [
        ip_packet(ETHERNET, t0, flow, 1000, seq=0),
        ip_packet(ETHERNET, t0 + 10_000, flow, 1000, seq=2000),
        ip_packet(ETHERNET, t0 + 1_500_000_000, flow, 1000, seq=3000),
        ip_packet(ETHERNET, t0 + 510_000, flow, 1000, seq=1000),
    ]
    path = write(tmp_path / "back.pcap", pcap_bytes(frames, linktype=LINKTYPE_ETHERNET)[0])
    data = path.read_bytes()
    cut = _record_after(bytearray(data), 25)
    cut = _record_after(bytearray(data), cut + 1)  # after the first two records
    plan = [pieces.Piece(path, 24, cut, cut - 24), pieces.Piece(path, cut, len(data), len(data) - cut)]
    parts = [scan_range(x.path, x.start, x.end, **OPTS) for x in plan]
    assert merge_host("h", [scan_stream([path], **OPTS)]).agg[0, L.AGG_RETRANS_BYTES] == 0
    assert fold_scans(parts).agg[0, L.AGG_RETRANS_BYTES] == 1000 and pieces.join(plan, parts) is None


def test_a_file_that_shrank_since_the_plan_is_not_joined(tmp_path: Path) -> None:
    """tcpdump may reopen a file between planning and reading: the piece stops at the file's real end
    (no read past the mapping) and says it did not end on its cut."""
    path = tmp_path / "ring.pcap"
    ring_capture(path, packets=5_000, conns=2)
    size = path.stat().st_size
    plan = pieces.plan([[path]], [size], 1 << 30, min_piece_bytes=size // 2)[0]
    with open(path, "r+b") as fh:
        fh.truncate(plan[-1].start + 1000)
    last = scan_range(path, plan[-1].start, plan[-1].end, **OPTS)
    assert not last.joinable and last.records > 0


def test_a_pcapng_file_is_not_cut_and_a_compressed_one_is_a_whole_piece(tmp_path: Path) -> None:
    """A rotation set holding a pcapng file is read whole: a pcapng piece would lack the interfaces (and Simple
    Packet Blocks the time) read before it. A gzip file of a classic pcap set is one piece, never cut (it would
    be inflated from its start for every piece), while the plain file beside it is cut."""
    first = tmp_path / "a.pcap"
    ring_capture(first, packets=5_000, conns=2)
    size = first.stat().st_size
    pcapng = [first, FIXTURES / "formats" / "multi.pcapng"]
    assert pieces.plan([pcapng], [size], 1 << 30, min_piece_bytes=size // 4) == [None]
    gz = FIXTURES / "formats" / "gzip-pcap.pcap.gz"
    plan = pieces.plan([[first, gz]], [size], 1 << 30, min_piece_bytes=size // 4)[0]
    assert plan is not None
    assert [p for p in plan if p.path == gz] == [pieces.Piece(gz, size=scan_bytes(gz))]
    assert len([p for p in plan if p.path == first]) >= 4


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_a_compressed_rotation_set_is_read_file_by_file_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """tcpdump -C ... -z gzip (or zstd afterwards): each compressed file of the set is a piece read by its own
    worker, and the joined stream equals the sequential read and the generator's counts."""
    import gzip

    import pyzstd

    plain = tmp_path / "plain.pcap"
    truth = ring_capture(plain, packets=40_000, conns=4)
    data = plain.read_bytes()
    starts = [_record_after(bytearray(data), len(data) * k // 3) for k in (1, 2)]
    rotated = []
    for i, (a, b) in enumerate(zip([24, *starts], [*starts, len(data)])):
        body = data[:24] + data[a:b]
        path = tmp_path / f"eth0.pcap{i}{suffix}"
        path.write_bytes(gzip.compress(body, 1) if suffix == ".gz" else pyzstd.compress(body, 3))
        rotated.append(path)
    monkeypatch.setattr(engine, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pieces, "MIN_PIECE_BYTES", 1 << 16)
    plan = pieces.plan([rotated], [sum(scan_bytes(p) for p in rotated)], 2)[0]
    assert plan is not None and [p.path for p in plan] == rotated and {p.start for p in plan} == {None}
    assert pieces.join(plan, [scan_range(p.path, **OPTS) for p in plan]) is not None  # every seam holds
    pooled = engine.scan_hosts([rotated], engine.ScanOptions(bin_ns=1_000_000, byte_mode=0), workers=2)[0]
    same_scan(pooled, scan_stream(rotated, **OPTS))
    assert merge_host("h", [pooled]).agg[:, L.AGG_IP_BYTES].sum() == truth.ip_bytes.sum()


def _pooled(paths: list[Path], monkeypatch: pytest.MonkeyPatch, piece_bytes: int) -> StreamScan:
    """The stream read by a 2-worker pool that cuts it into pieces of about piece_bytes."""
    monkeypatch.setattr(engine, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pieces, "MIN_PIECE_BYTES", piece_bytes)
    total = sum(p.stat().st_size for p in paths)
    assert pieces.plan([paths], [total], 2) is not None
    return engine.scan_hosts([paths], engine.ScanOptions(bin_ns=1_000_000, byte_mode=0), workers=2)[0]


def _record_after(data: bytearray, offset: int) -> int:
    """Offset of the first classic pcap record starting at or after `offset`."""
    pos = 24
    while pos < offset:
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    return pos


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
    pooled = engine.scan_hosts(streams, opts, workers=2)
    for got, paths in zip(pooled, streams):
        same_scan(got, scan_stream(paths, **OPTS))
    assert merge_host("h", [pooled[0]]).agg[:, L.AGG_IP_BYTES].sum() == truth.ip_bytes.sum()
