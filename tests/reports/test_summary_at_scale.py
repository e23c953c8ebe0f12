"""The terminal summary stays readable with many hosts: a 64-host ring (generated, its bytes known per host before
the analysis) prints the hosts that sent the most and the least and the distribution over all of them, one line
per assumption that repeats for every host, and one clock line, instead of a line per host for each."""

from __future__ import annotations

import statistics
from pathlib import Path

from analyze.api import analyze
from reports.text import EXTREMES, HOSTS_SHOWN, said_once, summary_text
from tests.benchmarks.synth import host_ip, ring_capture

HOSTS = 64


def _ring(tmp_path: Path) -> dict[str, int]:
    """Each host's capture of one 64-host ring; returns the bytes each host sent, from the generator."""
    sent = {}
    for me in range(1, HOSTS + 1):
        truth = ring_capture(tmp_path / f"host{me}.pcap", packets=2000, hosts=HOSTS, me=me, seed=me)
        own = host_ip(me)
        sent[f"host{me}"] = int(sum(int(b) for s, b in zip(truth.src, truth.ip_bytes) if s == own))
    return sent


def test_sixty_four_hosts_take_a_screen(tmp_path: Path) -> None:
    sent = _ring(tmp_path)
    text = summary_text(analyze([tmp_path], workers=1))
    lines = text.splitlines()
    assert len(lines) < 70 and max(map(len, lines)) < 300, (len(lines), max(map(len, lines)))

    ranked = sorted(sent, key=lambda h: (-sent[h], h))
    table = lines[lines.index(next(line for line in lines if line.startswith("host "))) + 1 :]
    table = table[: table.index("")]
    rows = [line.split()[0] for line in table if line.split()[0] in sent]
    assert rows == ranked[:EXTREMES] + ranked[-EXTREMES:]  # the extremes, as the generator sent them
    assert f"{HOSTS - 2 * EXTREMES} more hosts between these" in text
    spread = next(line for line in lines if line.startswith(f"all {HOSTS} hosts: "))
    tx = sorted(sent.values())
    median = statistics.median(tx)
    assert f"tx bytes min {tx[0]:,} / median {median:,.0f} / max {tx[-1]:,}" in spread

    speed = [line for line in lines if "link speed unknown" in line]
    assert len(speed) == 1 and speed[0].startswith(f"assumed: {HOSTS} hosts (host1, ")
    own = [line for line in lines if "own address inferred" in line]
    assert own == [
        f"assumed: {HOSTS} hosts (host1, host10, host11, host12, host13, host14, ... ({HOSTS - 6} more)): "
        "own address inferred from traffic as its address (no meta.json addresses)"
    ]
    clocks = [line for line in lines if line.startswith("clocks from the packets")]
    assert len(clocks) == 1 and f"{HOSTS - 1} hosts, offsets" in clocks[0]


def test_a_note_of_one_host_stays_as_written() -> None:
    hosts = {"a": ["10.0.0.1"], "b": ["10.0.0.2"], "c": ["10.0.0.3"]}
    notes = [
        "a: own address inferred from traffic as 10.0.0.1",
        "b: own address inferred from traffic as 10.0.0.2",
        "c: link speed unknown",
        "a capture ended early",
    ]
    assert said_once(notes, hosts) == [
        "2 hosts (a, b): own address inferred from traffic as its address",
        "c: link speed unknown",
        "a capture ended early",
    ]


def test_up_to_the_threshold_every_host_has_its_row(tmp_path: Path) -> None:
    for me in range(1, HOSTS_SHOWN + 1):
        ring_capture(tmp_path / f"host{me}.pcap", packets=200, hosts=HOSTS_SHOWN, me=me, seed=me)
    text = summary_text(analyze([tmp_path], workers=1))
    assert {f"host{me}" for me in range(1, HOSTS_SHOWN + 1)} <= {line.split()[0] for line in text.splitlines() if line}
    assert "more hosts between these" not in text and f"all {HOSTS_SHOWN} hosts" not in text
