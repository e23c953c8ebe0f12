"""Host clocks from the packets, on real training captures whose hosts' timestamps were rewritten with known
offsets and drifts. The captures were made in network namespaces on one kernel clock, so the truth is exactly
the rewrite: offset off + (F_ref - F_host) * ppm at the reference's first packet (each host's clock is moved
from its own first packet F_host), and a drift of ppm against the reference, which keeps its own clock."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from analyze.api import analyze
from analyze.tables.clocks import solve_sparse
from tests.support.pcap_clock import reclock
from tests.support.requirements import require

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real-training"
OFFSET_NS, DRIFT_PPM = 500_000, 5.0  # what the issue asks: offsets within 0.5 ms, drifts within 5 ppm
CLOCKS = {  # case -> {host: (offset ns, ppm)}; the reference (first of the launch order) keeps its clock
    "ddp-100mbit": {"h4": (37_000_000, 42.0), "h1": (-100_000_000, -50.0), "h3": (2_500_000, 17.0)},
    "horovod-3h": {"h3": (99_000_000, -35.0), "h1": (-61_000_000, 50.0)},
    "ddp-8h": {f"h{i}": ((-1) ** i * 12_000_000 * i, (-1) ** (i + 1) * 6.0 * i) for i in (1, 3, 4, 6, 7, 8)},
}


def first_ns(pcap: Path) -> int:
    raw = gzip.decompress(pcap.read_bytes()) if pcap.suffix == ".gz" else pcap.read_bytes()
    endian, unit = ("<", 1000) if raw[:4] == b"\xd4\xc3\xb2\xa1" else ("<", 1)
    assert raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"), raw[:4]
    sec, frac = struct.unpack_from(endian + "II", raw, 24)
    return sec * 1_000_000_000 + frac * unit


@pytest.mark.parametrize("case", sorted(CLOCKS))
def test_offsets_and_drifts_match_the_rewrite(case, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / case / "run", run)
    first = {h.name: first_ns(next(h.glob("eth0.pcap*"))) for h in run.iterdir() if h.is_dir()}
    for host, (offset, ppm) in CLOCKS[case].items():
        pcap = next((run / host).glob("eth0.pcap*"))
        reclock(pcap, pcap, offset, ppm)
    clock = analyze([run]).clock
    ref = clock.reference
    assert ref not in CLOCKS[case] and clock.t0_ns == first[ref] and not clock.notes
    for h in clock.hosts:
        offset, ppm = CLOCKS[case].get(h.name, (0, 0.0))
        want = offset + (first[ref] - first[h.name]) * ppm / 1e6
        assert abs(h.offset_ns - want) <= OFFSET_NS, (h, want)
        assert h.drift_ppm is not None and abs(h.drift_ppm - ppm) <= DRIFT_PPM, (h, ppm)
        assert h.samples > 1000 and 0 <= h.uncertainty_ns <= OFFSET_NS, h


def test_a_host_seen_from_one_side_only_is_not_estimated(tmp_path):
    """h1 keeps only the packets it sent: its received bytes and the ACKs it got were never captured on its
    side, so no delay can be measured both ways; the others still are."""
    require(shutil.which("tcpdump") is not None, "needs tcpdump to cut the capture")
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "horovod-3h" / "run", run)
    pcap = run / "h1" / "eth0.pcap.gz"
    plain = tmp_path / "h1.pcap"
    plain.write_bytes(gzip.decompress(pcap.read_bytes()))
    pcap.unlink()
    address = json.loads((run / "h1" / "meta.json").read_text())["addresses"][0].split("/")[0]
    done = subprocess.run(["tcpdump", "-r", str(plain), "-w", str(run / "h1" / "eth0.pcap"), f"src host {address}"])
    assert done.returncode == 0
    clock = analyze([run]).clock
    hosts = {h.name: h for h in clock.hosts}
    assert hosts["h1"].offset_ns is None and hosts["h1"].samples == 0
    assert [n for n in clock.notes if n.startswith("h1: clock not estimated")]
    assert hosts["h3"].offset_ns is not None and abs(hosts["h3"].offset_ns) <= OFFSET_NS


def test_the_report_draws_every_host_on_the_reference_clock(tmp_path):
    """Two hosts' clocks moved by whole 10 ms bins (no drift): on the report's axis their series are the
    unmoved capture's again, bin for bin."""
    from reports.figures import on_reference_clock
    from reports.html import render_html

    moves = {"h1": 50_000_000, "h3": -100_000_000}
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ddp-100mbit" / "run", run)
    for host, offset in moves.items():
        pcap = run / host / "eth0.pcap.gz"
        reclock(pcap, pcap, offset, 0.0)
    original, moved = analyze([FIXTURES / "ddp-100mbit" / "run"]), analyze([run])
    series, shifts = on_reference_clock(moved.tables.host_series, moved.clock, moved.bin_ns)
    assert shifts == moves
    for host in moves:
        want = original.tables.host_series.query("host == @host").reset_index(drop=True)
        got = series.query("host == @host").reset_index(drop=True)
        assert got[["direction", "t_ns", "bytes"]].equals(want[["direction", "t_ns", "bytes"]]), host
    assert "Times are on h2's clock: the hosts' clocks, measured from the packets, moved h1 -50 ms; h3 +100 ms" in (
        render_html(moved)
    )


def test_the_sparse_solve_matches_the_dense_least_squares_on_a_ring() -> None:
    """Past DENSE_HOSTS the pairs are solved by conjugate gradients: on a ring of 300 hosts with 20 chords and
    noisy, unequally weighted pairs, the same offsets as numpy's dense least squares within 0.01 ns (of offsets of
    milliseconds), and the reference held at 0."""
    rng = np.random.default_rng(3)
    n = 300
    truth = rng.normal(0.0, 5e6, n)
    a = np.concatenate([np.arange(n), rng.integers(0, n, 20)])
    b = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, 20)])
    a, b = a[a != b], b[a != b]
    w = 1.0 / rng.uniform(1e3, 1e5, len(a))
    value = truth[b] - truth[a] + rng.normal(0.0, 2e3, len(a))
    got = solve_sparse(a, b, w, value, n, ref=0)
    rows = np.zeros((len(a), n))
    rows[np.arange(len(a)), b] += w
    rows[np.arange(len(a)), a] -= w
    want = np.linalg.lstsq(rows[:, 1:], w * value, rcond=None)[0]
    assert got[0] == 0.0
    assert np.abs(got[1:] - want).max() < 0.01
