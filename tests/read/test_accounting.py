"""Byte accounting: from the IP header, never the captured length; fragments once; retransmissions;
--bytes ip|wire|payload; one flow seen by two hosts reported once, each host's link still counted."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from analyze.model.result import Result
from tests.support.expect import FIXTURES, flow_mismatches, flows_by_key, run, wire_truth
from tests.support.pcapgen import BASE_NS, ETHERNET, Flow, TcpConn, pcap_bytes, truth, udp_fragments, write
from tests.support.scenarios import MSS, TSO_PAYLOAD, load_truth, mixed

EXAMPLE = FIXTURES / "example"


def _fixture(name: str) -> tuple[dict, Result]:
    path = FIXTURES / "accounting" / name
    return load_truth(path), run([path])


def test_fragments_are_one_packet_with_all_their_bytes() -> None:
    """A UDP datagram in 3 IP fragments (IPv4 and IPv6) is 1 packet with every fragment's bytes."""
    truth, result = _fixture("fragments.pcap")
    assert flow_mismatches(result, truth["flows"]) == []
    flows = flows_by_key(result)
    f4 = flows[("10.8.0.1", "10.8.0.2", 50008, 7000, "udp")]
    assert f4.packets == 2  # a 100-byte datagram and a 3200-byte one in 3 fragments
    assert f4.payload_bytes == 100 + 3200
    assert f4.bytes == (20 + 8 + 100) + (3 * 20 + 8 + 3200)
    f6 = flows[("fd00:8::1", "fd00:8::2", 51008, 7001, "udp")]
    assert (f6.packets, f6.payload_bytes, f6.bytes) == (2, 3000 + 64, (3 * 48 + 8 + 3000) + (40 + 8 + 64))
    assert result.captures[0].frame_kinds == {"udp": 6, "ip_fragment": 6}  # first fragments are UDP


def test_fragments_arriving_before_their_first_fragment_still_count_once(tmp_path: Path) -> None:
    """Reordered on the way (last fragment first): still one datagram of the right flow with all its bytes."""
    flow = Flow("10.23.0.1", "10.23.0.2", 50023, 7000, "udp")
    pieces = udp_fragments(ETHERNET, 0, flow, 3000)
    frames = [replace(f, ts_ns=BASE_NS + i * 1000) for i, f in enumerate(reversed(pieces))]
    data, frames = pcap_bytes(frames, linktype=1, nano=True)
    assert flow_mismatches(run([write(tmp_path / "reordered.pcap", data)]), truth(frames)["flows"]) == []


def test_headers_only_tso_segments_count_the_ip_length() -> None:
    """Snaplen 96, 64 KB TSO segments: bytes come from the IP header, not the 96 captured bytes."""
    truth, result = _fixture("tso-headers-only.pcap")
    assert flow_mismatches(result, truth["flows"]) == []
    seg = flows_by_key(result)[("10.9.0.1", "10.9.0.2", 40009, 29500, "tcp")]
    assert seg.payload_bytes == 2 * TSO_PAYLOAD + 20 * MSS + MSS
    assert seg.bytes > 2 * 65000
    assert result.captures[0].bytes < 2000  # the whole file is smaller than one segment's header claims


def test_ip_length_zero_falls_back_to_the_frame_length() -> None:
    """BIG TCP sends (IPv4 total length 0, IPv6 payload length 0): the frame's wire length tells the size."""
    truth, result = _fixture("iplen0.pcap")
    assert flow_mismatches(result, truth["flows"]) == []
    v4 = flows_by_key(result)[("10.10.0.1", "10.10.0.2", 40010, 29500, "tcp")]
    assert v4.payload_bytes == 150_000 + TSO_PAYLOAD + 100 * MSS


def test_retransmitted_payload_bytes_from_sequence_numbers() -> None:
    """Whole and partial retransmissions, before and after the 2^32 sequence wrap; duplicate ACKs add nothing."""
    truth, result = _fixture("retransmissions.pcap")
    assert flow_mismatches(result, truth["flows"]) == []
    flow = flows_by_key(result)[("10.11.0.1", "10.11.0.2", 40011, 29500, "tcp")]
    assert flow.retransmitted_bytes == MSS + 500 + (2 * MSS - 948)
    assert flow.payload_bytes == 11 * MSS  # every payload byte sent, retransmitted ones included


def test_capture_reordering_is_not_retransmission() -> None:
    """Segments the tap saw a few µs out of order count nothing; a quick resend of seen bytes and a segment
    lost before the tap and resent 5 ms later count their 1,448 bytes each (what the sender knows)."""
    truth, result = _fixture("reordered.pcap")
    assert flow_mismatches(result, truth["flows"]) == []
    flow = flows_by_key(result)[("10.12.0.1", "10.12.0.2", 40012, 29500, "tcp")]
    assert flow.retransmitted_bytes == 2 * MSS


@pytest.mark.parametrize("mode,field", [("ip", "ip_bytes"), ("payload", "payload_bytes")])
def test_byte_modes_ip_and_payload(mode: str, field: str) -> None:
    """--bytes ip counts IP lengths, --bytes payload the TCP/UDP payload; flows and hosts agree."""
    path = FIXTURES / "accounting/tso-headers-only.pcap"
    truth = load_truth(path)
    result = run([path], byte_mode=mode)
    assert flow_mismatches(result, truth["flows"], bytes_field=field) == []
    host = result.hosts[0]  # its own address is inferred: the IPv4 end that is in the most packets
    assert host.addresses == ["10.9.0.1"]
    assert host.tx_bytes == sum(t[field] for t in truth["flows"] if t["src"] == "10.9.0.1")
    assert host.rx_bytes == sum(t[field] for t in truth["flows"] if t["dst"] == "10.9.0.1")


def test_wire_mode_adds_ethernet_framing_per_frame(tmp_path: Path) -> None:
    """MTU-sized and small packets: IP bytes + 38 bytes of framing each, short frames padded to the minimum."""
    data, frames = pcap_bytes(mixed(ETHERNET, 21, BASE_NS), linktype=1, nano=True)
    result = run([write(tmp_path / "mixed.pcap", data)], byte_mode="wire")
    assert {k: f.bytes for k, f in flows_by_key(result).items()} == wire_truth(frames)


def test_wire_mode_counts_the_frames_a_tso_segment_becomes(tmp_path: Path) -> None:
    """A 45 * 1448-byte TSO segment leaves the NIC as 45 frames of 1500 IP bytes, not 44."""
    conn = TcpConn(ETHERNET, "10.22.0.1", "10.22.0.2", 40022, 29500)
    frames = [conn.data(BASE_NS, TSO_PAYLOAD, keep=64), conn.data(BASE_NS + 10**6, 30 * MSS, keep=64)]
    data, frames = pcap_bytes(frames, linktype=1, nano=True, snaplen=96)
    result = run([write(tmp_path / "tso.pcap", data)], byte_mode="wire")
    assert {k: f.bytes for k, f in flows_by_key(result).items()} == wire_truth(frames)


def test_flow_seen_by_sender_and_receiver_is_reported_once() -> None:
    """Each ring flow is in two hosts' captures: one row, the sender's view, seen_by both."""
    expected = json.loads((EXAMPLE / "expected.json").read_text())
    result = run([EXAMPLE])
    assert flow_mismatches(result, expected["flows"]) == []
    address = {h: v["address"] for h, v in expected["hosts"].items()}
    host_of = {a: h for h, a in address.items()}
    for f in result.flows:
        assert f.view == host_of[f.src]
        assert sorted(f.seen_by) == sorted([host_of[f.src], host_of[f.dst]])
    views = result.tables.flow_views
    both = views.groupby("flow_id").agg(n=("host", "size"), packets=("packets", "nunique"), ip=("ip_bytes", "nunique"))
    assert (both["n"] == 2).all() and (both["packets"] == 1).all() and (both["ip"] == 1).all()


@pytest.mark.parametrize("mode", ["ip", "payload"])
def test_each_host_link_gets_its_own_tx_and_rx(mode: str) -> None:
    """Per host, tx is what it sent and rx what it received, never summed: 2(N-1)/N * S per iteration each way."""
    expected = json.loads((EXAMPLE / "expected.json").read_text())
    result = run([EXAMPLE], byte_mode=mode)
    assert [h.name for h in result.hosts] == expected["launch_order"]
    for h in result.hosts:
        e = expected["hosts"][h.name]
        assert (h.tx_bytes, h.rx_bytes) == (e[f"tx_{mode}_bytes"], e[f"rx_{mode}_bytes"])
        assert (h.tx_packets, h.rx_packets) == (e["tx_packets"], e["rx_packets"])
        assert h.link_speed_bps == 1e9 and h.link_speed_source == "meta"
    if mode == "payload":
        per_iter = 2 * (4 - 1) * expected["gradient_bytes"] // 4
        assert per_iter == expected["tx_payload_bytes_per_iteration"] == 6_291_456
        assert all(h.tx_bytes == expected["iterations"] * per_iter for h in result.hosts)


def test_host_without_metadata_says_what_it_assumed(tmp_path: Path) -> None:
    """A bare pcap: the own address is inferred from the traffic and the link speed assumed, both stated."""
    shutil.copy(EXAMPLE / "h1/eth0.pcap", tmp_path / "h1.pcap")
    result = run([tmp_path / "h1.pcap"])
    host = result.hosts[0]
    assert host.addresses == ["10.77.0.1"]
    assert host.link_speed_source == "assumed"
    assert any("inferred" in a for a in result.assumptions) and any("link speed" in a for a in result.assumptions)
    given = run([tmp_path / "h1.pcap"], link_speed_bps=25e9).hosts[0]
    assert (given.link_speed_bps, given.link_speed_source) == (25e9, "cli")
