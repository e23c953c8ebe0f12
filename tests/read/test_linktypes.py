"""Link types: Ethernet (plain, 802.1Q, QinQ), Linux cooked v1 and v2, raw IP — IPv4/IPv6, TCP/UDP, and
non-IP frames counted by kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.expect import FIXTURES, capture_mismatches, flow_mismatches, run
from tests.support.pcapgen import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
    BASE_NS,
    Flow,
    Frame,
    Link,
    arp_request,
    ip_packet,
    lldp,
    pcap_bytes,
    truth,
    write,
)
from tests.support.scenarios import SCENARIOS, load_truth

LINKTYPE_FIXTURES = [n for n in SCENARIOS if n.startswith("linktypes/")]
LINKS = {
    "ethernet": Link(LINKTYPE_ETHERNET),
    "dot1q": Link(LINKTYPE_ETHERNET, tags=("dot1q",)),
    "qinq": Link(LINKTYPE_ETHERNET, tags=("qinq",)),
    "sll": Link(LINKTYPE_LINUX_SLL),
    "sll-incoming": Link(LINKTYPE_LINUX_SLL, outgoing=False),
    "sll2": Link(LINKTYPE_LINUX_SLL2),
    "raw": Link(LINKTYPE_RAW),
}


@pytest.mark.parametrize("name", LINKTYPE_FIXTURES)
def test_fixture_matches_its_ground_truth(name: str) -> None:
    """The committed capture of each link type: flows, kinds (ARP, LLDP), times are exact."""
    path = FIXTURES / name
    truth_ = load_truth(path)
    result = run([path])
    assert flow_mismatches(result, truth_["flows"]) == []
    assert capture_mismatches(result.captures[0], truth_) == []


@pytest.mark.parametrize("family", ["v4", "v6"])
@pytest.mark.parametrize("link_name", list(LINKS))
def test_every_link_type_and_address_family(tmp_path: Path, link_name: str, family: str) -> None:
    """One TCP segment and one UDP datagram per link type and IP version decode to their flows."""
    link = LINKS[link_name]
    a, b = ("192.0.2.1", "192.0.2.2") if family == "v4" else ("2001:db8::1", "2001:db8::2")
    frames = [
        ip_packet(link, BASE_NS + 1_000, Flow(a, b, 33333, 443, "tcp"), 1200, seq=7, ack=9),
        ip_packet(link, BASE_NS + 2_000, Flow(b, a, 53, 33334, "udp"), 99),
    ]
    data, frames = pcap_bytes(frames, linktype=link.linktype, nano=True)
    result = run([write(tmp_path / "x.pcap", data)])
    assert flow_mismatches(result, truth(frames)["flows"]) == []


def test_non_ip_frames_are_counted_by_kind_never_dropped(tmp_path: Path) -> None:
    """ARP and LLDP carry no flow but every record lands in a kind, so the kinds add up to the records."""
    eth = Link(LINKTYPE_ETHERNET)
    frames = [arp_request(eth, BASE_NS + i, "10.0.0.1", "10.0.0.2") for i in range(3)]
    frames += [lldp(eth, BASE_NS + 10 + i, "10.0.0.1") for i in range(2)]
    frames.append(ip_packet(eth, BASE_NS + 20, Flow("10.0.0.1", "10.0.0.2", 1, 2, "udp"), 10))
    data, frames = pcap_bytes(frames, linktype=LINKTYPE_ETHERNET, nano=True)
    result = run([write(tmp_path / "kinds.pcap", data)])
    cap = result.captures[0]
    assert cap.frame_kinds == {"arp": 3, "other_ethertype": 2, "udp": 1}
    assert sum(cap.frame_kinds.values()) == cap.packets == 6
    assert len(result.flows) == 1


def test_unknown_link_type_is_counted_not_guessed(tmp_path: Path) -> None:
    """A link type the reader does not decode (147, USER0) yields no flows and one kind count per record."""
    frames = [
        Frame(ts_ns=BASE_NS + i, linktype=147, data=bytes(40), wire_len=40, kind="unknown_linktype") for i in range(4)
    ]
    data, _ = pcap_bytes(frames, linktype=147, nano=True)
    result = run([write(tmp_path / "user0.pcap", data)])
    assert result.flows == []
    assert result.captures[0].frame_kinds == {"unknown_linktype": 4}
    assert result.captures[0].linktypes == ["linktype_147"]
