"""`ringscope convert PATH... --parquet OUT`: the run as a Parquet dataset, queried with DuckDB and analyzed again.

The packet table is checked row by row against frames whose every field the generator chose (scapy decodes
their TCP fields independently of the analyzer); the dataset of the real 4-host DDP example is checked against
what its job recorded (truth.json), and `analyze OUT` against `analyze` of the pcaps, key by key.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.clirun import one_line_error, ringscope
from tests.support.expect import ROOT
from tests.support.pcapgen import (
    ETHERNET,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL2,
    Flow,
    Frame,
    Link,
    pcap_bytes,
    udp_fragments,
)
from tests.support.requirements import require, require_module
from tests.support.scenarios import mixed, v4, v6

duckdb = require_module("duckdb")  # a test extra: pip install -e '.[test]'

EXAMPLE = ROOT / "fixtures/example-ddp"
IP_KINDS = ("tcp", "udp", "ip_fragment")
T0 = 1_750_000_000_000_000_000


def _frames(link: Link, net: int) -> list[Frame]:
    """Everything mixed() holds, then a UDP datagram cut into fragments over IPv4 and over IPv6."""
    frames = mixed(link, net, T0 + net * 10**9)
    t = frames[-1].ts_ns + 1_000_000
    frames += udp_fragments(link, t, Flow(v4(net, 1), v4(net, 3), 9000, 9001, "udp"), 3000, ip_id=0x77)
    frames += udp_fragments(link, t + 10**6, Flow(v6(net, 1), v6(net, 3), 9002, 9003, "udp"), 2500, pieces=2)
    return frames


def _expected_row(host: str, f: Frame) -> tuple:
    """The packet row of frame F, from the generator's truth and scapy's reading of the frame's bytes."""
    from scapy.layers.inet import TCP
    from scapy.layers.l2 import CookedLinuxV2, Ether

    assert f.flow is not None
    later = f.kind == "ip_fragment"
    pkt = (Ether if f.linktype == LINKTYPE_ETHERNET else CookedLinuxV2)(f.data)
    seq = ack = window = None
    flags = 0
    if f.flow.proto == "tcp":
        tcp = pkt[TCP]
        flags, seq, window = int(tcp.flags), tcp.seq, tcp.window
        ack = tcp.ack if flags & 0x10 else None
    return (
        host,
        f.ts_ns,
        str(ipaddress.ip_address(f.flow.src)),
        str(ipaddress.ip_address(f.flow.dst)),
        0 if later else f.flow.sport,
        0 if later else f.flow.dport,
        6 if f.flow.proto == "tcp" else 17,
        f.wire_len,
        f.ip_bytes,
        f.payload_bytes,
        flags,
        seq,
        ack,
        window,
        later,
    )


@pytest.fixture
def two_hosts(tmp_path: Path) -> tuple[Path, dict[str, list[Frame]]]:
    """A folder of two hosts' pcaps (Ethernet in µs, Linux cooked v2 in ns) and the frames each file holds."""
    written = {}
    folder = tmp_path / "caps"
    folder.mkdir()
    for host, net, link, nano in (("h1", 1, ETHERNET, False), ("h2", 2, Link(LINKTYPE_LINUX_SLL2), True)):
        data, frames = pcap_bytes(_frames(link, net), linktype=link.linktype, nano=nano)
        (folder / f"{host}.pcap").write_bytes(data)
        written[host] = frames
    return folder, written


def _query(sql: str) -> list[tuple]:
    return duckdb.sql(sql).fetchall()


def test_packet_table_holds_every_ip_packet_as_the_generator_built_it(two_hosts, tmp_path: Path) -> None:
    folder, written = two_hosts
    out = tmp_path / "ds"
    proc = ringscope("convert", folder, "--parquet", out)
    assert proc.returncode == 0, proc.stderr
    rows = _query(
        f"select host, time_ns, src, dst, sport, dport, proto, frame_bytes, ip_bytes, payload_bytes, tcp_flags, "
        f"seq, ack, tcp_window, fragment from read_parquet('{out}/packets/*/*.parquet', hive_partitioning=true) "
        f"order by host, time_ns, ip_bytes"
    )
    expected = sorted(
        (_expected_row(h, f) for h, frames in written.items() for f in frames if f.kind in IP_KINDS),
        key=lambda r: (r[0], r[1], r[8]),
    )
    assert len(expected) == 2 * (18 + 5)  # a host: mixed()'s 18 IP packets and 5 fragments (ARP, LLDP are not IP)
    assert rows == expected
    not_ip = {h: sum(f.kind not in IP_KINDS for f in frames) for h, frames in written.items()}
    files = _query(
        f"select host, records, kind_arp + kind_other_ethertype from read_parquet('{out}/files/*/*.parquet', "
        f"hive_partitioning=true) order by host"
    )
    assert files == [(h, len(written[h]), not_ip[h]) for h in ("h1", "h2")]
    assert not_ip == {"h1": 2, "h2": 1}  # what the packet table leaves out, the files table counts
    manifest = json.loads((out / "ringscope-dataset.json").read_text())
    assert [h["packets"] for h in manifest["hosts"]] == [len(written[h]) - not_ip[h] for h in ("h1", "h2")]


def test_flows_and_bins_add_up_to_the_generators_bytes(two_hosts, tmp_path: Path) -> None:
    """Per flow and host, the flows table and the sum of its time bins both give the bytes the generator sent."""
    folder, written = two_hosts
    out = tmp_path / "ds"
    assert ringscope("convert", folder, "--parquet", out, "--bin", "1ms").returncode == 0
    truth: dict[tuple, int] = {}
    for host, frames in written.items():
        for f in frames:
            if f.flow is not None:
                key = (host, str(ipaddress.ip_address(f.flow.src)), str(ipaddress.ip_address(f.flow.dst)))
                key += (f.flow.sport, f.flow.dport)
                truth[key] = truth.get(key, 0) + f.ip_bytes
    flows = f"read_parquet('{out}/flows/*/*.parquet', hive_partitioning=true)"
    bins = f"read_parquet('{out}/flow_bins/*/*.parquet', hive_partitioning=true)"
    got = _query(f"select host, src, dst, sport, dport, ip_bytes from {flows} where sport > 0")
    assert {r[:5]: r[5] for r in got} == truth
    summed = _query(
        f"select f.host, f.src, f.dst, f.sport, f.dport, sum(b.bytes) from {flows} f join {bins} b "
        f"on f.host = b.host and f.flow = b.flow where f.sport > 0 group by all"
    )
    assert {r[:5]: r[5] for r in summed} == truth
    assert _query(f"select count(*) from {bins} where bin_start_ns % 1000000 != 0") == [(0,)]
    import pandas as pd  # pandas reads the partitioned folder as it is, the host partition becoming a column

    frame = pd.read_parquet(out / "flows")
    frame = frame[frame.sport > 0]
    keys = zip(frame.host.astype(str), frame.src, frame.dst, frame.sport, frame.dport)
    assert dict(zip(keys, frame.ip_bytes)) == truth


def test_analyzing_the_dataset_gives_what_analyzing_the_pcaps_gives(tmp_path: Path) -> None:
    """The real 4-host DDP example: every key of the result JSON is equal, and the job's own truth holds."""
    out = tmp_path / "ds"
    assert ringscope("convert", EXAMPLE / "run", "--parquet", out).returncode == 0
    direct = ringscope("analyze", EXAMPLE / "run", "--json", tmp_path / "pcaps.json")
    again = ringscope("analyze", out, "--json", tmp_path / "dataset.json")
    assert direct.returncode == 0 and again.returncode == 0, again.stderr
    assert direct.stdout == again.stdout
    doc = json.loads((tmp_path / "dataset.json").read_text())
    assert doc == json.loads((tmp_path / "pcaps.json").read_text())
    truth = json.loads((EXAMPLE / "truth.json").read_text())
    its = doc["iterations"]
    assert its["count"] == len(truth["iterations"]) and doc["topology"]["launch_order"] == truth["launch_order"]
    n = truth["world_size"]
    for host, sent in its["bytes_per_iteration_per_host"]["by_host"].items():
        assert abs(sent / (2 * (n - 1) / n * truth["gradient_bytes"]) - 1) < 0.01, host
    # the packet table sums to each host's sent bytes, counted from its own address
    addresses = {
        h: json.loads((EXAMPLE / f"run/{h}/meta.json").read_text())["addresses"][0] for h in truth["launch_order"]
    }
    own = " or ".join(f"(host = '{h}' and src = '{a}')" for h, a in addresses.items())
    sent = dict(
        _query(
            f"select host, sum(ip_bytes) from read_parquet('{out}/packets/*/*.parquet', hive_partitioning=true) "
            f"where {own} group by host"
        )
    )
    assert sent == {h["name"]: h["tx_bytes"] for h in doc["hosts"]}


def test_a_lossy_run_without_markers_reads_back_as_unsure_as_from_its_pcaps(tmp_path: Path) -> None:
    """Real continuous DDP on 3 hosts over a lossy link, no markers (fixtures/real-training/ddp-lossy-rto): the
    dataset gives the pcaps' result key by key, the doubt included: its S stays unsure, and says why. Its
    flows, as each sender captured them, re-sent the 13-16 % of their payload the fixture was recorded with."""
    real = ROOT / "fixtures/real-training/ddp-lossy-rto/run"
    out = tmp_path / "ds"
    assert ringscope("convert", real, "--parquet", out).returncode == 0
    direct = ringscope("analyze", real, "--json", tmp_path / "pcaps.json")
    again = ringscope("analyze", out, "--json", tmp_path / "dataset.json")
    assert direct.returncode == 0 and again.returncode == 0, again.stderr
    assert direct.stdout == again.stdout
    doc = json.loads((tmp_path / "dataset.json").read_text())
    assert doc == json.loads((tmp_path / "pcaps.json").read_text())
    its = doc["iterations"]
    assert its["source"] == "inferred" and (its["count"] == 14 or not its["confident"])  # 14: its README
    assert doc["scaling"]["unsure"]["because"]
    own = " or ".join(f"(host = '{h['name']}' and src = '{h['addresses'][0]}')" for h in doc["hosts"])
    flows = f"read_parquet('{out}/flows/*/*.parquet', hive_partitioning=true)"
    (share,) = _query(f"select sum(retrans_bytes) / sum(payload_bytes) from {flows} where {own}")[0]
    assert 0.13 <= share <= 0.16, share


def test_a_dataset_converts_alike_in_a_pool_and_in_small_blocks(tmp_path: Path, monkeypatch) -> None:
    """Two workers (a host each) write what one does; rows handed over in blocks of 1,000 (many row groups, the
    memory bound at work) are the rows of one block."""
    from analyze.dataset.convert import convert
    from analyze.read.reading import ReadOptions
    from analyze.read import scan

    whole = convert([EXAMPLE / "run"], tmp_path / "one", ReadOptions(bin_ns=10**7, byte_mode="ip", workers=1))
    pooled = convert([EXAMPLE / "run"], tmp_path / "two", ReadOptions(bin_ns=10**7, byte_mode="ip", workers=2))
    monkeypatch.setattr(scan, "ROWS_PER_FLUSH", 1000)
    blocks = convert([EXAMPLE / "run"], tmp_path / "blocks", ReadOptions(bin_ns=10**7, byte_mode="ip", workers=1))
    assert whole.packets == pooled.packets == blocks.packets == 28_174
    for table in ("packets", "flows", "flow_bins", "samples", "files"):
        one = _query(f"select * from read_parquet('{tmp_path}/one/{table}/*/*.parquet', hive_partitioning=true)")
        for other in ("two", "blocks"):
            got = _query(
                f"select * from read_parquet('{tmp_path}/{other}/{table}/*/*.parquet', hive_partitioning=true)"
            )
            assert sorted(got, key=repr) == sorted(one, key=repr), (table, other)
    groups = _query(
        f"select count(distinct row_group_id) from parquet_metadata('{tmp_path}/blocks/packets/*/*.parquet')"
    )
    assert groups[0][0] >= 7  # 7,071 rows on h1 alone, 1,000 a block


def test_convert_refuses_what_it_cannot_do_in_one_line(two_hosts, tmp_path: Path) -> None:
    folder, _ = two_hosts
    out = tmp_path / "ds"
    assert ringscope("convert", folder, "--parquet", out).returncode == 0
    line = one_line_error(ringscope("convert", folder, "--parquet", out))
    assert f"{out}: offset 0: exists and is not an empty folder" in line
    line = one_line_error(ringscope("analyze", out, "--bin", "10ms"))
    assert "binned at 1 ms counting ip bytes" in line and "convert the captures again" in line
    line = one_line_error(ringscope("convert", tmp_path / "nothing", "--parquet", tmp_path / "x"))
    assert "no such file or directory" in line and not (tmp_path / "x").exists()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "h1.pcap").write_bytes((folder / "h1.pcap").read_bytes()[:20])  # a pcap header cut short
    (cut / "h2.pcap").write_bytes((folder / "h2.pcap").read_bytes())
    for workers in ("1", "2"):  # in this process, and in a pool whose other host may be written meanwhile
        line = one_line_error(ringscope("convert", cut, "--parquet", tmp_path / workers, "--workers", workers))
        assert "h1.pcap" in line and list((tmp_path / workers).iterdir()) == []  # nothing half-written is left
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "flows/host=h2/part-0.parquet").write_bytes(b"PAR1 not really")
    line = one_line_error(ringscope("analyze", broken))
    assert f"{broken}/flows/host=h2/part-0.parquet: offset 0: cannot read the dataset's flows table" in line
    manifest = json.loads((broken / "ringscope-dataset.json").read_text())
    (broken / "ringscope-dataset.json").write_text(json.dumps({**manifest, "hosts": [{"files": []}]}))
    assert "a host entry of the manifest is malformed" in one_line_error(ringscope("analyze", broken))
    (broken / "ringscope-dataset.json").write_text('{"format": "ringscope-dataset", "schema": 99}')
    line = one_line_error(ringscope("analyze", broken))
    assert "dataset schema 99; this ringscope reads schema 1" in line


def test_a_damaged_capture_converts_its_valid_part_and_says_so(tmp_path: Path) -> None:
    """A pcap cut mid-record: the rows before the cut are all there, and the files table keeps the warning."""
    data, frames = pcap_bytes(_frames(ETHERNET, 1), linktype=LINKTYPE_ETHERNET)
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:-10])
    out = tmp_path / "ds"
    proc = ringscope("convert", cut, "--parquet", out)
    assert proc.returncode == 0, proc.stderr
    kept = [f for f in frames[:-1] if f.kind in IP_KINDS]
    assert _query(f"select count(*), sum(ip_bytes) from '{out}/packets/*/*.parquet'") == [
        (len(kept), sum(f.ip_bytes for f in kept))
    ]
    (warnings,) = _query(f"select warnings from '{out}/files/*/*.parquet'")[0]
    assert len(warnings) == 1 and "last record truncated" in warnings[0]
    again = ringscope("analyze", out)
    assert again.returncode == 0 and "last record truncated" in again.stderr + again.stdout


def test_frames_padded_or_not_keep_their_own_frame_length(tmp_path: Path) -> None:
    """frame_bytes is the length on the link (a padded 60-byte frame), ip_bytes the IP header's."""
    flow = Flow(v4(5, 1), v4(5, 2), 1, 2, "udp")
    from tests.support.pcapgen import ip_packet

    f = ip_packet(replace(ETHERNET, pad=True), T0, flow, 6)
    data, _ = pcap_bytes([f], linktype=LINKTYPE_ETHERNET)
    (tmp_path / "p.pcap").write_bytes(data)
    assert ringscope("convert", tmp_path / "p.pcap", "--parquet", tmp_path / "ds").returncode == 0
    assert _query(f"select frame_bytes, ip_bytes, payload_bytes from '{tmp_path}/ds/packets/*/*.parquet'") == [
        (60, 34, 6)
    ]


def test_rdma_packets_carry_their_qp_opcode_and_psn(tmp_path: Path) -> None:
    """A RoCEv2 run converted: each packet row's QP, opcode and PSN are what tshark's InfiniBand dissector reads in
    the same file, in the same order; and the dataset analyzes to the same queue pairs and limiter as the pcaps."""
    from analyze.api import analyze
    from tests.support import rocegen as R

    require(shutil.which("tshark") is not None, "needs tshark (apt-get install tshark)")
    gen = R.generate(R.RoceRing(hosts=3, iterations=2, losses=(R.Loss(0, 1, 0, 12),)))
    run = R.write_run(tmp_path / "run", gen)
    out = tmp_path / "ds"
    proc = ringscope("convert", run, "--parquet", out, "--bin", "1ms")
    assert proc.returncode == 0, proc.stderr
    rows = _query(
        f"select qp, opcode, psn from read_parquet('{out}/packets/*/*.parquet', hive_partitioning=true) "
        f"where host = 'node1' order by time_ns, psn, qp, opcode"
    )
    fields = ["-e", "frame.time_epoch", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.opcode"]
    decoded = subprocess.run(
        ["tshark", "-n", "-r", str(run / "node1" / "mlx5_0.pcap"), "-T", "fields", *fields, "-e", "infiniband.bth.psn"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    expected = sorted(
        ((t, int(q, 16), int(o), int(p)) for t, q, o, p in (line.split("\t") for line in decoded)),
        key=lambda r: (r[0], r[3], r[1], r[2]),
    )
    assert rows == [r[1:] for r in expected]
    direct = analyze([run], bin_ns=1_000_000)
    again = analyze([out])
    assert direct.rdma is not None and again.rdma is not None
    assert [(q.src, q.dst, q.qp, q.packets, q.resent_packets, q.naks) for q in again.rdma.qps] == [
        (q.src, q.dst, q.qp, q.packets, q.resent_packets, q.naks) for q in direct.rdma.qps
    ]
    assert again.rdma.limiter == direct.rdma.limiter
