"""Three opinions on every committed capture: the analyzer, dpkt, tshark. Per-flow IP bytes must be identical.

dpkt decodes each packet independently of the analyzer (tests/support/oracles.py). tshark is asked for each
packet's IP header fields rather than `-z conv,tcp`/`conv,udp`, whose byte totals are frame bytes
(link header and Ethernet padding included) and whose UDP conversations count reassembled datagrams;
summing ip.len (IPv4) and 40 + ipv6.plen (IPv6) per directed 5-tuple, with defragmentation off and
later fragments credited to their first fragment's flow, is the same quantity ringscope reports.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.support.expect import FIXTURES, run
from tests.support.oracles import Totals, dpkt_flows, tshark_flows
from tests.support.requirements import have, require
from tests.support.scenarios import SCENARIOS

CAPTURES = [n for n in SCENARIOS if not n.endswith("corrupt.pcap")] + [
    f"example/{h}/eth0.pcap" for h in ("h1", "h2", "h3", "h4")
]
# tshark 4.0 cannot dissect an IPv6 packet whose payload length is 0 (BIG TCP without a jumbo option):
# those address pairs are left out of its opinion, and only those.
TSHARK_BLIND = {"accounting/iplen0.pcap": {("fd00:10::1", "fd00:10::2")}}


def _analyzer(path: Path) -> Totals:
    out = Totals()
    result = run([path])
    for f in result.flows:
        out.add((f.src, f.dst, f.sport, f.dport, f.proto), f.packets, f.bytes, f.payload_bytes)
    out.kinds.update({k: v for k, v in result.captures[0].frame_kinds.items() if k in ("arp", "other_ethertype")})
    return out


def _without_payload(totals: dict) -> dict:
    return {k: {"packets": v["packets"], "ip_bytes": v["ip_bytes"]} for k, v in totals.items()}


@pytest.mark.parametrize("name", CAPTURES)
def test_analyzer_equals_dpkt(name: str) -> None:
    """Packets, IP bytes and payload bytes of every flow, and the ARP / other-ethertype counts."""
    path = FIXTURES / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        second = dpkt_flows(path)
    ours = _analyzer(path)
    assert dict(ours) == dict(second)
    assert dict(ours.kinds) == dict(second.kinds)
    assert sum(v["ip_bytes"] for v in ours.values()) > 0


@pytest.mark.parametrize("name", CAPTURES)
def test_analyzer_equals_tshark(name: str) -> None:
    """Packets and IP bytes of every flow tshark can dissect."""
    require(have("tshark"), "needs tshark (apt-get install tshark)")
    path = FIXTURES / name
    third = tshark_flows(path)
    blind = TSHARK_BLIND.get(name, set())
    assert third.undissected == blind
    ours = {k: v for k, v in _analyzer(path).items() if (k[0], k[1]) not in blind}
    theirs = {k: v for k, v in third.items() if (k[0], k[1]) not in blind}
    assert _without_payload(ours) == _without_payload(theirs)
