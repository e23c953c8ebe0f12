"""Properties (Hypothesis): totals do not depend on how a capture was cut into files, named, ordered,
compressed or read (chunk sizes, table sizes, bin width), and no input makes the reader crash."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyze.read import inflate, scan
from analyze.read.formats import FileError
from tests.support.expect import FIXTURES, flow_mismatches, run
from tests.support.pcapgen import (
    BASE_NS,
    ETHERNET,
    Frame,
    Interface,
    Section,
    TcpConn,
    gzip_bytes,
    pcap_bytes,
    pcapng_bytes,
    truth,
    write,
)
from tests.support.scenarios import MSS, TSO_PAYLOAD, mixed

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _base_frames() -> list[Frame]:
    """Several hosts' worth of mixed traffic plus headers-only TSO segments, in time order (no fragments:
    a datagram cut between two files is two orphans by design, tested elsewhere)."""
    frames = [f for net in (41, 42, 43) for f in mixed(ETHERNET, net, BASE_NS + net * 1_000_003)]
    c = TcpConn(ETHERNET, "10.44.0.1", "10.44.0.2", 40044, 29500, isn_c=2**32 - 10)
    frames += [c.data(BASE_NS + 41_000_000 + i * 97_001, TSO_PAYLOAD if i % 3 else MSS, keep=16) for i in range(12)]
    return sorted(frames, key=lambda f: f.ts_ns)


BASE = _base_frames()
TRUTH = truth(BASE)
FORMATS = ["pcap-ns-le", "pcap-ns-be", "pcapng", "pcap-ns-le+gzip", "pcapng+gzip"]
# tcpdump's rotated names that the analyzer groups into one stream: -W ring (x.pcap0, x.pcap1, ...),
# -G with epoch seconds (the capture sidecar's x.pcap%s), -G with a compact strftime stamp
NAMINGS = {
    "ring": lambda i: f"eth0.pcap{i}",
    "epoch": lambda i: f"eth0.pcap{1_700_000_000 + 60 * i}",
    "strftime": lambda i: f"eth0-20231114-2213{i:02d}.pcap",
}


def _encode(frames: list[Frame], fmt: str) -> bytes:
    if fmt.startswith("pcapng"):
        data, _ = pcapng_bytes([Section([Interface(1, tsresol=9)], [(0, f) for f in frames])])
    else:
        data, _ = pcap_bytes(frames, linktype=1, nano=True, big_endian=fmt.startswith("pcap-ns-be"))
    return gzip_bytes(data) if fmt.endswith("+gzip") else data


def write_split(folder: Path, cuts: list[int], formats: list[str], names: list[str]) -> list[Path]:
    """BASE cut at `cuts` into files, the i-th piece in formats[i] under names[i]."""
    bounds = [0, *cuts, len(BASE)]
    return [
        write(folder / names[i], _encode(BASE[a:b], formats[i])) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))
    ]


@st.composite
def splits(draw: st.DrawFn) -> tuple[list[int], list[str], list[str], list[int], bool]:
    cuts = sorted(draw(st.sets(st.integers(1, len(BASE) - 1), max_size=5)))
    n = len(cuts) + 1
    formats = draw(st.lists(st.sampled_from(FORMATS), min_size=n, max_size=n))
    naming = NAMINGS[draw(st.sampled_from(list(NAMINGS)))]
    order = draw(st.permutations(range(n)))  # names deliberately not in time order
    names = [naming(order[i]) for i in range(n)]
    pass_order = draw(st.permutations(range(n)))
    return cuts, formats, names, pass_order, draw(st.booleans())


@SETTINGS
@given(split=splits())
def test_bytes_are_conserved_under_any_rotation_and_file_order(
    tmp_path_factory: pytest.TempPathFactory, split: tuple
) -> None:
    """Any cut points, per-file format, names out of time order, files given in any order or as a folder."""
    cuts, formats, names, pass_order, as_folder = split
    folder = tmp_path_factory.mktemp("rot")
    files = write_split(folder, cuts, formats, names)
    result = run([folder] if as_folder else [files[i] for i in pass_order])
    assert len(result.hosts) == 1, [h.name for h in result.hosts]
    assert flow_mismatches(result, TRUTH["flows"]) == []
    assert sum(c.packets for c in result.captures) == TRUTH["records"]
    assert result.hosts[0].first_ns == TRUTH["first_ns"] and result.hosts[0].last_ns == TRUTH["last_ns"]


@pytest.mark.parametrize(
    "names",
    [
        pytest.param(["eth0.pcap", "eth0.pcap1", "eth0.pcap2"], id="tcpdump-C"),
        pytest.param(["eth0.pcap0.gz", "eth0.pcap1.gz", "eth0.pcap2.gz"], id="tcpdump-W-z-gzip"),
        pytest.param(["eth0.pcap0", "eth0.pcap1", "eth0.pcap2"], id="tcpdump-C-W"),
    ],
)
def test_tcpdump_rotation_names_make_one_stream(tmp_path: Path, names: list[str]) -> None:
    """The names tcpdump really writes group into one host whose totals are the whole capture's."""
    fmt = "pcap-ns-le+gzip" if names[0].endswith(".gz") else "pcap-ns-le"
    write_split(tmp_path, [len(BASE) // 3, 2 * len(BASE) // 3], [fmt] * 3, names)
    result = run([tmp_path])
    assert [h.name for h in result.hosts] == ["eth0"]
    assert flow_mismatches(result, TRUTH["flows"]) == []


def test_retransmissions_are_counted_across_a_file_boundary(tmp_path: Path) -> None:
    """Rotation falls just before a retransmission: the retransmitted bytes are still counted."""
    c = TcpConn(ETHERNET, "10.45.0.1", "10.45.0.2", 40045, 29500)
    frames = [c.data(BASE_NS + i, MSS) for i in range(4)] + [
        c.resend(BASE_NS + 10, MSS, MSS),
        c.resend(BASE_NS + 11, 4 * MSS - 100, MSS),
    ]
    write(tmp_path / "eth0.pcap0", pcap_bytes(frames[:4], linktype=1, nano=True)[0])
    write(tmp_path / "eth0.pcap1", pcap_bytes(frames[4:], linktype=1, nano=True)[0])
    assert flow_mismatches(run([tmp_path]), truth(frames)["flows"]) == []


SMALL = [
    FIXTURES / "formats/multi.pcapng",
    FIXTURES / "accounting/tso-headers-only.pcap",
    FIXTURES / "accounting/fragments.pcap",
]


def _flows_json(result) -> list[dict]:  # noqa: ANN001 - analyze.model.result.Result
    return sorted(result.to_json()["flows"], key=lambda f: (f["src"], f["dst"], f["sport"], f["dport"], f["proto"]))


BASELINE = {p: _flows_json(run([p])) for p in SMALL}


@SETTINGS
@given(
    records=st.integers(1, 40),
    flows=st.sampled_from([2, 4, 8, 16]),
    cells=st.integers(2, 40),
    path=st.sampled_from(SMALL),
)
def test_results_do_not_depend_on_read_windows_or_table_sizes(records: int, flows: int, cells: int, path: Path) -> None:
    """The kernel is re-entered every few records and its tables grow or flush often: same flows."""
    with (
        mock.patch.object(scan, "RECORDS_PER_CALL", records),
        mock.patch.object(scan, "INITIAL_FLOWS", flows),
        mock.patch.object(scan, "CELLS_PER_FLUSH", cells),
    ):
        assert _flows_json(run([path])) == BASELINE[path]


@SETTINGS
@given(
    slot=st.integers(64, 20_000),
    kind=st.sampled_from(["gzip", "zstd"]),
    path=st.sampled_from(SMALL),
)
def test_results_do_not_depend_on_the_inflated_windows(slot: int, kind: str, path: Path, tmp_path: Path) -> None:
    """A compressed capture is walked in slots of any size, records cut at any byte: same flows as the plain file."""
    import pyzstd

    data = path.read_bytes()
    name = path.name + (".gz" if kind == "gzip" else ".zst")  # the same host name as the plain file's
    packed = write(tmp_path / f"{kind}-{slot}" / name, gzip_bytes(data) if kind == "gzip" else pyzstd.compress(data, 1))
    with mock.patch.object(inflate, "SLOT", slot):
        assert _flows_json(run([packed])) == BASELINE[path]


@SETTINGS
@given(bin_ns=st.integers(1_000, 2_000_000_000))
def test_series_add_up_to_the_totals_for_any_bin(bin_ns: int) -> None:
    """Per-flow and per-host series, at any bin width, sum to the flow and host totals."""
    result = run([FIXTURES / "example"], bin_ns=bin_ns)
    t = result.tables
    per_flow = t.flow_series.groupby("flow_id")["bytes"].sum()
    assert dict(zip(t.flows["flow_id"], t.flows["bytes"])) == per_flow.to_dict()
    assert (t.flow_series["t_ns"] % bin_ns == 0).all() and (t.host_series["t_ns"] % bin_ns == 0).all()
    f, ts = t.flow_series["flow_id"].to_numpy(), t.flow_series["t_ns"].to_numpy()
    assert ((f[1:] > f[:-1]) | ((f[1:] == f[:-1]) & (ts[1:] > ts[:-1]))).all()  # one row per (flow, bin), in order
    for h in result.hosts:
        rows = t.host_series[t.host_series["host"] == h.name]
        assert rows[rows["direction"] == "tx"]["bytes"].sum() == h.tx_bytes
        assert rows[rows["direction"] == "rx"]["bytes"].sum() == h.rx_bytes


FUZZ_SEEDS = [
    FIXTURES / n
    for n in (
        "formats/multi.pcapng",
        "formats/pcap-us-be.pcap",
        "linktypes/eth-qinq.pcap",
        "accounting/fragments.pcap",
        "linktypes/linux-sll2.pcap",
    )
]


@SETTINGS
@given(
    seed=st.sampled_from(FUZZ_SEEDS),
    edits=st.lists(st.tuples(st.floats(0, 1), st.binary(min_size=0, max_size=24)), min_size=1, max_size=12),
    keep=st.floats(0.05, 1.0),
)
def test_damaged_files_never_crash_the_reader(
    tmp_path_factory: pytest.TempPathFactory, seed: Path, edits: list[tuple[float, bytes]], keep: float
) -> None:
    """Overwritten and cut-off bytes give a result with warnings or a FileError, never anything else."""
    data = bytearray(seed.read_bytes())
    for where, junk in edits:
        at = int(where * (len(data) - 1))
        data[at : at + len(junk)] = junk
    path = write(tmp_path_factory.mktemp("fuzz") / seed.name, bytes(data[: max(1, int(len(data) * keep))]))
    try:
        result = run([path])
    except FileError as exc:
        assert str(path) in str(exc) and "offset" in str(exc)
        return
    assert sum(f.packets for f in result.flows) <= result.captures[0].packets
