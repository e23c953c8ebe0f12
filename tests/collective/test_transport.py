"""Why the link is not full: the transport diagnosis names the one cause applied to a real ring before its
capture, and its TCP counters agree with tshark's own analysis of the same packets.

Causes, each applied alone in network namespaces (tests/support/netns.py) before the job starts:
- loss: a tbf queue of 0.5 ms with a 16 kB burst overflows under ring bursts (committed DDP capture, and the
  live lossy DDP and gloo cases of test_real_training.py, whose check_lossy asserts the same);
- receive window: net.ipv4.tcp_rmem capped in every host's namespace (gloo loop and DDP, live);
- link: a 100 Mbit ring (committed DDP capture; a gloo loop, live);
- sender: small all-reduces with compute between them on a 1 Gbit ring (a gloo loop with a sleep, and DDP of a
  small model on big batches; live).
The audit runs tshark (tcp.analysis.*) on the same files: per-flow duplicate ACKs, re-sent bytes, zero
windows, window-full segments and ACK round trips, with the agreement stated per metric below.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from analyze.wire.transport import LOSS_FRACTION
from tests.support.netns import netns_cluster  # noqa: F401  (pytest fixture)
from tests.support.requirements import require
from tests.support.training_capture import Job, live_capture, sure_in_one_of_two_runs

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "real-training"
RMEM_CAP = "4096 8192 16384"  # receive buffers of at most 16 kB: windows of about 9 kB


def _transport(run: Path) -> dict:
    from analyze.api import analyze

    t = analyze([run], workers=1).transport
    print(json.dumps({k: getattr(t, k) for k in ("limiter", "confidence", "evidence", "notes")}))
    return t


def _ring_edges(t: dict, hosts: int) -> list[dict]:
    """The ring's edges: the `hosts` heaviest (each carries the all-reduce; the rest is control traffic)."""
    return t.edges[:hosts]


# A job whose edges are each named at 0.5 (a sender whose bursts leave at line rate, idle between its steps: as sure
# as the bins allow, docs/transport.md) reads 0.49 where a light edge of another cause (1 % of the bytes) weighs in.
NAMED_AT = 0.45


def _named(t: dict, cause: str, hosts: int) -> None:
    assert t.limiter == cause, t.evidence
    assert t.confidence >= NAMED_AT, (t.confidence, t.evidence)
    assert [e.limiter for e in _ring_edges(t, hosts)] == [cause] * hosts


@pytest.mark.parametrize("case, cause, hosts", [("ddp-lossy-rto", "loss", 3), ("ddp-100mbit", "link", 4)])
def test_committed_ddp_captures_name_the_cause_applied(case: str, cause: str, hosts: int) -> None:
    t = _transport(FIXTURES / case / "run")
    _named(t, cause, hosts)
    ring = _ring_edges(t, hosts)
    if cause == "loss":  # the capture's README: segments dropped by the tbf queue and re-sent
        assert all(e.retransmitted_fraction > 0.05 and e.dup_acks > 100 for e in ring)
        # the re-sent bytes over time (thinned like the samples, each kept segment standing for those it
        # replaces) add up to the flow's exact total within 2 %
        for e in ring:
            assert sum(e.series.resent_bytes) == pytest.approx(e.retransmitted_bytes, rel=0.02)
    else:  # a deep htb queue at 100 Mbit/s: busy at line rate, nothing lost, the window never full
        assert all(e.rate_while_busy > 0.85 and e.retransmitted_fraction < 1e-4 for e in ring)
        assert all(e.window_full_fraction < 0.01 for e in ring)
        # and so in every iteration the job ran (8, from each rank's own step record): sending at line rate,
        # hardly ever idle while communicating
        truth = json.loads((FIXTURES / case / "truth.json").read_text())
        for e in ring:
            per = e.per_iteration
            assert len(per.index) >= len(truth["iterations"]), per
            assert np.median(per.rate_while_busy) > 0.85 and np.median(per.idle_share) < 0.1, per


def test_live_gloo_receive_window(tmp_path: Path, netns_cluster) -> None:  # noqa: F811
    """tcp_rmem capped at 16 kB in every namespace: the in flight sits at the ~9 kB advertised window."""
    job = Job(
        workload="gloo",
        hosts=3,
        rate="1gbit",
        iters=5,
        params=2_000_000,
        pause_s=0.1,
        order=[2, 3, 1],
        tcp_rmem=RMEM_CAP,
    )
    run, _ = live_capture(tmp_path, netns_cluster, job)
    t = _transport(run)
    _named(t, "receive_window", 3)
    for e in _ring_edges(t, 3):
        assert e.window_full_fraction > 0.5 and e.window_mean_bytes < 16_384
        assert e.inflight_max_bytes <= 16_384
        assert 0 < max(e.series.inflight_bytes) <= 16_384  # over time too, never past the capped buffer
    _audit(run)


def test_live_ddp_receive_window(tmp_path: Path, netns_cluster) -> None:  # noqa: F811
    job = Job(workload="ddp", hosts=3, rate="1gbit", iters=6, order=[2, 3, 1], tcp_rmem=RMEM_CAP)
    run, _ = live_capture(tmp_path, netns_cluster, job)
    _named(_transport(run), "receive_window", 3)


def test_live_gloo_link(tmp_path: Path, netns_cluster) -> None:  # noqa: F811
    """8 MB all-reduces on a 100 Mbit/s ring: each takes most of a second at line rate."""
    job = Job(workload="gloo", hosts=3, rate="100mbit", iters=3, params=2_000_000, pause_s=0.1, order=[3, 1, 2])
    run, _ = live_capture(tmp_path, netns_cluster, job)
    t = _transport(run)
    _named(t, "link", 3)
    assert all(e.rate_while_busy > 0.85 for e in _ring_edges(t, 3))


SENDER_LIMITED = {
    # 256 kB all-reduces with 20 ms of compute before each, on a 1 Gbit/s ring
    "gloo": (Job(workload="gloo", hosts=3, rate="1gbit", iters=40, params=65_536, pause_s=0.02, order=[2, 1, 3]), 0.6),
    # DDP of a 0.2 M-parameter model on batches of 512: long compute for 0.8 MB of gradients per step
    "ddp": (Job(workload="ddp", hosts=3, rate="1gbit", iters=20, params=200_000, batch=512, order=[2, 3, 1]), 0.8),
}


@pytest.mark.parametrize("name", SENDER_LIMITED)
def test_live_sender(tmp_path: Path, netns_cluster, name: str) -> None:  # noqa: F811
    """Small all-reduces with compute between them: the link idles between sends, the window is far from full
    and nothing is lost, so the application is what holds the link back.

    Nothing is lost unless the machine drops packets itself: a loaded 2-core CI machine once lost enough on one
    of DDP's ring edges for the kernel to re-send 0.5 % of its bytes (CI, 2026-11-29), and ringscope rightly
    called that edge loss-limited and the job sender-limited at 0.33. Such a capture no longer has one cause, so
    where tshark's own analysis finds the re-sent bytes on every edge ringscope calls lossy, it gets one more
    capture (counted, tests/support/tries.py); any other answer fails."""
    job, max_rate = SENDER_LIMITED[name]

    def attempt(folder: Path) -> bool | str:
        run, _ = live_capture(folder, netns_cluster, job)
        t = _transport(run)
        lossy = [e for e in _ring_edges(t, 3) if e.limiter == "loss"]
        if lossy and t.limiter == "sender":
            shares = {f"{e.src} -> {e.dst}": _resent_share(run, e.src, e.dst) for e in lossy}
            assert all(s >= LOSS_FRACTION for s in shares.values()), shares  # tshark saw no such loss
            return f"the machine lost packets: tshark's re-sent shares {shares}"
        _named(t, "sender", 3)
        for e in _ring_edges(t, 3):
            assert e.rate_while_busy < max_rate and e.retransmitted_fraction < LOSS_FRACTION
            assert e.inflight_mean_bytes < e.window_mean_bytes / 4
        return True

    sure_in_one_of_two_runs(tmp_path, attempt)


def _resent_share(run: Path, src: str, dst: str) -> float:
    """The share of SRC's TCP payload bytes to DST that tshark flags re-sent, in SRC's capture."""
    require(shutil.which("tshark") is not None, "needs tshark (apt-get install tshark)")
    to = json.loads((run / dst / "meta.json").read_text())["addresses"][0]
    (pcap,) = sorted((run / src).glob("eth0.pcap*"))
    argv = ["tshark", "-r", str(pcap), "-Y", f"tcp.len > 0 && ip.dst == {to}", "-T", "fields", "-E", "occurrence=f"]
    argv += ["-e", "tcp.len", "-e", "tcp.analysis.retransmission", "-e", "tcp.analysis.fast_retransmission"]
    lines = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True).stdout.splitlines()
    sent = resent = 0
    for line in lines:
        n, rtx, frtx = (line.split("\t") + ["", ""])[:3]
        sent += int(n)
        resent += int(n) if (rtx or frtx) else 0
    return resent / max(sent, 1)


# ---- the audit: tshark's TCP analysis of the same files

TSHARK_FIELDS = [
    "tcp.srcport",
    "tcp.dstport",
    "tcp.len",
    "tcp.analysis.retransmission",
    "tcp.analysis.fast_retransmission",
    "tcp.analysis.duplicate_ack",
    "tcp.analysis.zero_window",
    "tcp.analysis.window_full",
    "tcp.analysis.ack_rtt",
]


def _tshark(pcap: Path) -> dict[tuple[int, int], dict[str, float]]:
    """Per directed port pair: data bytes, re-sent bytes, duplicate ACKs, zero-window and window-full segments,
    data segments, and the median ACK round trip (ns), as tshark's expert analysis finds them."""
    argv = ["tshark", "-r", str(pcap), "-Y", "tcp", "-T", "fields", "-E", "occurrence=f"]
    for f in TSHARK_FIELDS:
        argv += ["-e", f]
    lines = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True).stdout.splitlines()
    out: dict[tuple[int, int], dict[str, float]] = {}
    rtts: dict[tuple[int, int], list[float]] = {}
    for line in lines:
        sp, dp, ln, rtx, frtx, dup, zw, wf, rtt = (line.split("\t") + [""] * 9)[:9]
        key = (int(sp), int(dp))
        c = out.setdefault(key, dict(bytes=0, resent=0, dup=0, zero=0, full=0, segments=0))
        n = int(ln or 0)
        c["bytes"] += n
        c["segments"] += n > 0
        c["resent"] += n if (rtx or frtx) else 0
        c["dup"] += bool(dup)
        c["zero"] += bool(zw)
        c["full"] += bool(wf)
        if rtt:
            rtts.setdefault(key, []).append(float(rtt) * 1e9)
    for key, values in rtts.items():
        out[key]["rtt_ns"] = float(np.median(values))
    return out


def _ours(pcap: Path) -> dict[tuple[int, int], dict[str, float]]:
    """The same per port pair from ringscope's read of the one file (its kernel counters and round trips)."""
    import pandas as pd

    from analyze.tables.flows import address_text
    from analyze.read import layouts as L
    from analyze.read.fold import merge_host, scan_host
    from analyze.tables.capture_holes import missing_payload
    from analyze.tables.tcp_flows import flow_transport

    hf = merge_host("h", [scan_host([pcap], bin_ns=10_000_000, byte_mode=L.BYTES_IP)])
    ports = (hf.keys[:, 4] >> np.uint64(8)).astype(np.int64)
    sport, dport = ports >> 16, ports & 0xFFFF
    views = pd.DataFrame(
        {
            "flow_id": np.arange(len(hf.keys)),
            "sent_here": True,
            "proto": np.where((hf.keys[:, 4] & np.uint64(0xFF)) == 6, "tcp", ""),
            "payload_bytes": hf.agg[:, L.AGG_PAYLOAD_BYTES],
            "missing_payload": missing_payload(hf.agg),  # the capture is whole: none
        }
    )
    flows, trips = flow_transport([hf], views)
    trips = trips[trips["what"] == "round_trip_ns"]
    median = trips.groupby("flow_id")["value"].median()
    out = {}
    for i in range(len(hf.keys)):
        a = hf.agg[i]
        out[(int(sport[i]), int(dport[i]))] = dict(
            bytes=a[L.AGG_PAYLOAD_BYTES],
            resent=a[L.AGG_RETRANS_BYTES],
            dup=a[L.AGG_DUP_ACKS],
            zero=a[L.AGG_ZERO_WINS],
            full=a[L.AGG_WIN_FULL_BYTES],
            rtt_ns=float(median.get(i, np.nan)),
            src=address_text(int(hf.keys[i, 0]), int(hf.keys[i, 1])),
        )
    return out


def _audit(run: Path) -> None:
    """Every host's capture: ringscope against tshark on each flow of at least 1 MB, or its ACK flow."""
    require(shutil.which("tshark") is not None, "needs tshark (apt-get install tshark)")
    for pcap in sorted(run.glob("*/eth0.pcap*")):
        own = json.loads((pcap.parent / "meta.json").read_text())["addresses"]
        if pcap.suffix == ".gz":  # tshark reads gzip too, but slowly: a plain copy beside the run
            plain = run.parent / f"{pcap.parent.name}.pcap"
            plain.write_bytes(gzip.decompress(pcap.read_bytes()))
            pcap = plain
        theirs, ours = _tshark(pcap), _ours(pcap)
        for key, t in theirs.items():
            o, back = ours[key], theirs.get((key[1], key[0]))
            # duplicate ACKs: the same rule (a pure ACK repeating the last ACK and window): within 1 % + 2
            assert abs(o["dup"] - t["dup"]) <= 0.01 * t["dup"] + 2, (pcap, key, o, t)
            if t["bytes"] < 1_000_000:
                continue
            # re-sent bytes: tshark calls a fill later than the flow's smallest round trip a retransmission, as
            # the kernel does (after 20 µs at the least): within 10 % of tshark's, or 0.1 % of the flow's bytes
            assert abs(o["resent"] - t["resent"]) <= max(0.1 * t["resent"], 0.001 * t["bytes"]), (pcap, key, o, t)
            # window full: tshark flags a segment reaching the window's edge exactly; ringscope the bytes after
            # which another segment of their size would not fit: shares within 15 points
            assert abs(o["full"] / o["bytes"] - t["full"] / t["segments"]) < 0.15, (pcap, key, o, t)
            if back is not None:
                # zero windows: tshark flags every segment advertising one, ringscope each time one opens
                zero = ours[(key[1], key[0])]["zero"]
                assert (zero > 0) == (back["zero"] > 0) and zero <= back["zero"], (pcap, key, zero, back)
                # round trips, in the sender's capture. tshark's ACK RTT times every ACK against the segment it
                # acknowledges; ringscope times a marked byte's first send to the first ACK past it. Without
                # loss the medians agree within a factor of 2 (or 50 µs); with loss ringscope's include the
                # recovery of the bytes lost on the way, so its median is the longer. (In the receiver's capture
                # ringscope's wait for the ACK past a byte behind a hole includes that hole's recovery too.)
                if o["src"] in own and "rtt_ns" in back and np.isfinite(o["rtt_ns"]):
                    if t["resent"] < 0.01 * t["bytes"]:
                        assert abs(o["rtt_ns"] - back["rtt_ns"]) <= max(back["rtt_ns"], 50_000), (pcap, key, o, back)
                    else:
                        assert o["rtt_ns"] >= back["rtt_ns"], (pcap, key, o, back)


def test_tcp_counters_agree_with_tshark_on_a_lossy_capture(tmp_path: Path) -> None:
    """The committed lossy DDP capture (3 hosts; 13-16 % of the ring's bytes re-sent, a thousand duplicate ACKs
    per flow): per flow and capture, the counters ringscope reads in its one pass against tshark's analysis."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ddp-lossy-rto" / "run", run)
    _audit(run)
