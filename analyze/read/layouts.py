"""Constants shared by the compiled reader and the Python side: link types, frame kinds, table columns.

Declared once here so the numba kernel, the merge code and the JSON result agree on every index.
"""

from __future__ import annotations

# Link types (https://www.tcpdump.org/linktypes.html) the reader decodes.
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_BSD = 12  # DLT_RAW on most BSD-derived systems
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
LINKTYPE_INFINIBAND = 247  # raw InfiniBand packets from the Local Routing Header on (libpcap's RDMA sniffer, IB port)

LINKTYPE_NAMES = {
    LINKTYPE_NULL: "null",
    LINKTYPE_ETHERNET: "ethernet",
    LINKTYPE_RAW_BSD: "raw",
    LINKTYPE_RAW: "raw",
    LINKTYPE_LINUX_SLL: "linux_sll",
    LINKTYPE_IPV4: "ipv4",
    LINKTYPE_IPV6: "ipv6",
    LINKTYPE_LINUX_SLL2: "linux_sll2",
    LINKTYPE_INFINIBAND: "infiniband",
}


def linktype_name(linktype: int) -> str:
    """Readable name of a link type; unknown ones keep their number."""
    return LINKTYPE_NAMES.get(linktype, f"linktype_{linktype}")


# Frame kinds: every record lands in exactly one, so nothing is dropped silently.
KIND_TCP = 0
KIND_UDP = 1
KIND_ICMP = 2
KIND_OTHER_IP = 3  # IP with another protocol (e.g. GRE, SCTP): still a flow with ports 0
KIND_FRAGMENT = 4  # IP fragment after the first: bytes join the first fragment's flow
KIND_ARP = 5
KIND_OTHER_ETHERTYPE = 6  # non-IP frame (LLDP, STP, ...)
KIND_UNKNOWN_LINKTYPE = 7
KIND_TRUNCATED = 8  # captured too short to reach the IP header
KIND_BAD_IP = 9  # IP header that does not parse (version, header length)
KIND_ROCE = 10  # RDMA transport: RoCEv2 (UDP 4791), RoCEv1 (Ethertype 0x8915) or an InfiniBand link-layer packet
N_KINDS = 11
KIND_NAMES = (
    "tcp",
    "udp",
    "icmp",
    "other_ip",
    "ip_fragment",
    "arp",
    "other_ethertype",
    "unknown_linktype",
    "truncated",
    "bad_ip_header",
    "roce",
)

# Columns of the per-flow int64 aggregate table filled by the kernel.
AGG_PACKETS = 0
AGG_IP_BYTES = 1
AGG_WIRE_BYTES = 2
AGG_PAYLOAD_BYTES = 3
AGG_FIRST_NS = 4
AGG_LAST_NS = 5
AGG_RETRANS_BYTES = 6
AGG_SEQ_END = 7  # highest TCP sequence end seen (mod 2^32), -1 before the first data segment
AGG_CUR_BIN = 8  # series bin being accumulated
AGG_CUR_BYTES = 9
AGG_GAP_LO = 10  # the latest hole in the sequence space ([lo, hi) mod 2^32 not seen yet); -1: none
AGG_GAP_HI = 11
AGG_GAP_NS = 12  # when that hole opened
AGG_GAP2_LO = 13  # the hole before it (two CPUs feeding the tap can leave two open at once); -1: none
AGG_GAP2_HI = 14
AGG_GAP2_NS = 15
AGG_SEQ_FIRST = 16  # sequence number of the first data segment, -1 before it: where a piece's flow picks up
AGG_SEQ_FIRST_NS = 17  # when that segment was captured
AGG_ACK_TOP = 18  # highest TCP acknowledgment number seen (mod 2^32), -1 before the first ACK
AGG_DATA_MARKS = 19  # sample positions this flow's new data has passed (see SAMPLE_BUDGET)
AGG_ACK_MARKS = 20  # sample positions this flow's ACKs have passed
# TCP behaviour (analyze.wire.transport): counted per flow in the same pass, from the headers only.
AGG_REV = 21  # row of the reverse flow (its ACKs and windows answer this flow's data), -1 until found
AGG_WIN = 22  # the latest advertised window field (unscaled), -1 before the first ACK
AGG_WSCALE = 23  # window scale this flow announced in its SYN (0: SYN without the option), -1: no SYN seen
AGG_DUP_ACKS = 24  # pure ACKs at the next sequence repeating the top ACK and a non-zero window (tshark)
AGG_SACK_ACKS = 25  # pure ACKs carrying SACK blocks: the receiver saw a hole
AGG_ZERO_WINS = 26  # times the window closed to zero
AGG_ZERO_WIN_NS = 27  # time spent at a zero window
AGG_ZERO_SINCE = 28  # when the window closed, -1 while it is open
AGG_INFLIGHT_SUM = 29  # over new data segments with the reverse flow's ACK known: bytes in flight after each
AGG_INFLIGHT_N = 30
AGG_INFLIGHT_MAX = 31
AGG_WIN_SUM = 32  # over those with the receiver's window scale known: the advertised window in bytes
AGG_WIN_N = 33
AGG_WIN_FULL_BYTES = 34  # payload of segments after which another of their size would not fit in the window
AGG_MARK_POS = 35  # the latest sample position this flow's new data passed, and when: the first ACK past it
AGG_MARK_NS = 36  # (on the reverse flow) gives a round trip
AGG_RTT_MIN = 37  # smallest such round trip, -1 before the first
AGG_REORDER_BYTES = 38  # bytes below the highest sequence that filled a hole soon enough: reordered, not re-sent
AGG_RESENT_MARKS = 39  # re-sent segments seen (their SAMPLE_RESENT rows thin out like the samples)
AGG_TSVAL = 40  # the latest TCP timestamp value on this flow's data, -1 before one
AGG_TSECR = 41  # the latest timestamp this flow's ACKs echoed, -1 before one
AGG_TSVAL_MARKS = 42  # timestamp values seen each way (their rows thin out like the samples)
AGG_TSECR_MARKS = 43
# RDMA (RoCE and InfiniBand): a flow is a queue pair, keyed (source, destination, destination QP) with the QP in
# the port word and PROTO_ROCE as the protocol. Counted per flow from the Base Transport Header and its extension
# headers (InfiniBand Architecture Specification vol. 1, ch. 9; RoCEv2: annex A17). PSNs are 24 bits.
AGG_ROCE_WRITE_BYTES = 44  # payload of RDMA WRITE packets
AGG_ROCE_SEND_BYTES = 45  # payload of SEND packets (RC, UC, UD)
AGG_ROCE_READ_BYTES = 46  # payload of RDMA READ responses
AGG_ROCE_MESSAGES = 47  # requests begun: the first or only packet of a SEND, WRITE, READ request or atomic
AGG_ROCE_IMM = 48  # packets with immediate data (NCCL's completion of a chunk)
AGG_ROCE_ACKS = 49  # ACK packets (AETH syndrome ACK), answering the reverse flow's requests
AGG_ROCE_NAKS = 50  # NAKs for a PSN sequence error: the receiver saw a gap, the sender goes back to it
AGG_ROCE_RNR_NAKS = 51  # receiver-not-ready NAKs
AGG_ROCE_NAK_ERRORS = 52  # NAKs for invalid requests, access or operational errors: the QP breaks
AGG_ROCE_CNPS = 53  # congestion notification packets (opcode 0x81) sent to this flow's destination QP
AGG_ROCE_CE = 54  # packets marked Congestion Experienced in the IP (or GRH) header
AGG_ROCE_FECN = 55  # BTH FECN bits set (InfiniBand congestion control)
AGG_ROCE_BECN = 56
AGG_ROCE_PSN_NEXT = 57  # the PSN after the highest request PSN seen (mod 2^24), -1 before the first request
AGG_ROCE_PSN_GAPS = 58  # request PSNs skipped: not seen (yet) when a later one came
AGG_ROCE_RESENT = 59  # request packets at or below the highest PSN seen: sent again (go-back-N or a timeout)
AGG_ROCE_RESENDS = 60  # resend episodes: a resend after new requests
AGG_ROCE_TIMEOUTS = 61  # resend episodes after the flow was quiet ROCE_TIMEOUT_NS or more: no NAK asked for it
AGG_ROCE_IN_RESEND = 62  # 1 while the flow resends (until a new PSN), else 0
AGG_ROCE_VERSION = 63  # 2 RoCEv2, 1 RoCEv1, 3 InfiniBand link layer
AGG_ROCE_REQ_MARKS = 64  # request samples passed (SAMPLE_RDMA_REQUEST), thinned by their PSN's hash
AGG_ROCE_ACK_MARKS = 65  # ACK samples passed (SAMPLE_RDMA_EVENT, ACK)
AGG_ROCE_EVENT_MARKS = 66  # NAK, CNP, resend events passed (SAMPLE_RDMA_EVENT), thinned like re-sent rows
AGG_ROCE_STALL_NS = 67  # the quiet time before each timeout's resend: what the timer cost the queue pair
# The rate a flow sends at, from packet times (analyze.wire.send_rate): packets sharing a timestamp form a group,
# and a group's wire bytes left in the time since the group before it. Each group adds its bytes and that time to
# the half-octave bin of its rate (bin k: 2^(PACE_LOW_LOG2 + k/2) bit/s and up; the ends hold what lies beyond), so
# the rate of a flow's median byte, exact within its bin, reads alike whatever the series' bin width.
AGG_GROUP_NS = 68  # the timestamp of the flow's latest group, 0 before its first packet
AGG_GROUP_BYTES = 69  # that group's wire bytes so far
AGG_GROUP_PREV_NS = 70  # the group's before it, 0 while there is none: the latest group's time is unknown then
PACE_BINS = 32
PACE_LOW_LOG2 = 23  # 8.4 Mbit/s: bin 0 holds every slower group; bin 31 every one from 2^38.5 (389 Gbit/s) on
AGG_PACE_BYTES = 71  # PACE_BINS columns: wire bytes by the rate they left at
AGG_PACE_NS = AGG_PACE_BYTES + PACE_BINS  # PACE_BINS columns: the time they took
# TCP payload bytes inside the flow's sequence span that this capture never saw (analyze.read.fold.seq_missing): what
# a sniffer that fell behind lost. Written when a stream is folded, from the sequence columns folding then drops.
AGG_SEQ_MISSING = AGG_PACE_NS + PACE_BINS
# a RoCEv2 queue pair's UDP source port: the entropy a switch's ECMP hash reads (0 for RoCEv1 and InfiniBand)
AGG_ROCE_SPORT = AGG_SEQ_MISSING + 1
N_AGG = AGG_ROCE_SPORT + 1

# An InfiniBand packet routed without a GRH has 16-bit local IDs for addresses: keyed as (LID_KEY_HI_VALUE, LID).
LID_KEY_HI_VALUE = 0x4C49_4400_0000_0000  # "LID" in the high word: no IPv6 unicast address starts so
PROTO_ROCE = 0x1B  # the flow key's protocol for a queue pair: the GRH's next header for a BTH (27)
ROCE_UDP_PORT = 4791
# A resend after the queue pair was quiet this long was not asked for by a NAK (which comes within a round trip):
# the requester's retransmission timer fired. RoCE's shortest timeout (4.096 us x 2^n, NCCL_IB_TIMEOUT 18-22) is
# far above a LAN round trip, so any gap over a millisecond is the timer.
ROCE_TIMEOUT_NS = 1_000_000

# A hole filled within this time of opening is the capture's own reordering (two CPUs handing packets
# to the tap out of order, a few µs apart), not a retransmission; tshark's out-of-order window is 3 ms.
# Once a flow's round trip is known the window shrinks to it (not below REORDER_FLOOR_NS), as tshark's does:
# a resend sooner than a round trip cannot answer the receiver, and on a LAN a fast retransmit fills a hole
# a few tens of µs after it opened (a fixed 1 ms called 3 in 4 re-sent bytes reordering on a lossy link).
REORDER_NS = 1_000_000
REORDER_FLOOR_NS = 20_000

# Kernel state vector (int64) carried between calls so a file can be read in bounded windows.
ST_POS = 0
ST_NFLOWS = 1
ST_NCELLS = 2
ST_STATUS = 3
ST_SWAP = 4  # pcapng: current section is byte-swapped
ST_IFACE_BASE = 5  # pcapng: index of the current section's interface 0
ST_NIFACE = 6
ST_LAST_NS = 7
ST_RECORDS = 8
ST_FIRST_NS = 9
ST_MAX_NS = 10
ST_PACKET_BYTES = 11  # sum of captured lengths, for health reports
ST_NSAMPLES = 12  # rows of the samples table in use
ST_BASE = 13  # stream offset of the buffer's first byte (an inflated file is read in windows)
ST_LAST_AT = 14  # stream offset of the last record read
ST_NJUMPS = 15  # rows of the jumps table in use
ST_JUMPS_SEEN = 16  # jumps seen in this file, whether the table had room or not
ST_NROWS = 17  # rows of the packet-rows table in use
N_ST = 18

# A jump: two records in a row whose timestamps are more than JUMP_NS apart, one of them perhaps a packet dated
# far outside its capture (a mutated or garbage timestamp). Rows of the int64 jumps table, per file, the first
# MAX_JUMPS of them: the later record's number in the file, both records' stream offsets and times.
# analyze.read.outliers decides which side lies outside the capture's span.
JUMP_NS = 86_400 * 1_000_000_000
MAX_JUMPS = 256
JUMP_RECORD, JUMP_BEFORE_AT, JUMP_BEFORE_NS, JUMP_AT, JUMP_AT_NS, N_JUMP = 0, 1, 2, 3, 4, 5

# Kernel return status.
STATUS_END = 0
STATUS_FLOWS_FULL = 1
STATUS_CELLS_FULL = 2
STATUS_TRUNCATED = 3  # last record cut short (tcpdump killed mid-write)
STATUS_CORRUPT = 4  # a record header that cannot be right
STATUS_BUDGET = 5  # processed the records asked for; call again
STATUS_TOO_MANY_IFACES = 6
STATUS_SAMPLES_FULL = 7
STATUS_ROWS_FULL = 8

# Packet rows: with a rows table of non-zero length (`ringscope convert`), the kernel also writes each IP
# packet's decoded header fields as one int64 row, from the same decode that feeds the flow table, so the
# dataset's packet table and the flow table cannot disagree. Addresses are 128-bit keys as in the flow table
# (IPv4 mapped into IPv6), stored bit for bit; seq, ack and window are -1 where the packet has none; FRAGMENT is
# 1 for an IP fragment after the first (its ports are unknown); QP, opcode and PSN are an RDMA packet's (its BTH's
# destination QP, opcode and PSN), -1 for other packets. Non-IP, non-RDMA records are counted in kinds, not listed.
(
    ROW_NS,
    ROW_SRC_HI,
    ROW_SRC_LO,
    ROW_DST_HI,
    ROW_DST_LO,
    ROW_SPORT,
    ROW_DPORT,
    ROW_PROTO,
    ROW_FRAME_BYTES,
    ROW_IP_BYTES,
    ROW_PAYLOAD_BYTES,
    ROW_FLAGS,
    ROW_SEQ,
    ROW_ACK,
    ROW_WINDOW,
    ROW_FRAGMENT,
    ROW_QP,
    ROW_OPCODE,
    ROW_PSN,
    N_ROW,
) = range(20)

# Sequence samples: the same bytes and the same ACKs, recognisable in every capture that saw them, whatever
# the segmentation (TSO, GRO) on each side. A data sample is the first new segment holding a byte at a multiple
# of 2^SAMPLE_SHIFT of the sequence space; an ACK sample is the first acknowledgment reaching past one. Rows of
# the int64 samples table: (flow row << SAMPLE_FLOW_SHIFT | position | SAMPLE_ACK for an ACK, capture time ns),
# 16 bytes each. They give one-way delays between two hosts' captures (analyze.tables.clocks).
# Memory stays flat however long a flow runs: after SAMPLE_BUDGET positions a flow keeps every second one, after
# 3 x SAMPLE_BUDGET every fourth, and so on (about SAMPLE_BUDGET per doubling). Two captures of one flow that
# began at different positions may be at different levels; the coarser one keeps a subset of the finer one's
# positions, so every sample of the coarser side still has its match.
# More kinds of row share the table, for the transport's time series (analyze.wire.transport): at each kept data
# sample, the bytes in flight just after it (SAMPLE_INFLIGHT); a segment's re-sent bytes (SAMPLE_RESENT), kept
# like the samples (every one at first, every 2nd after SAMPLE_BUDGET, ...) and so stored multiplied by the
# share they stand for, so a sum over time stays near the flow's re-sent total; and TCP timestamps: a value's
# first data segment (SAMPLE_TSVAL) and the first ACK echoing it (SAMPLE_TSECR), kept by the value's low bits
# as positions are, so the two sides keep the same values and pair into round trips.
SAMPLE_SHIFT = 16
SAMPLE_BUDGET = 1024
SAMPLE_ACK = 1 << 32
SAMPLE_RESENT = 2 << 32
SAMPLE_INFLIGHT = 3 << 32
SAMPLE_TSVAL = 4 << 32
SAMPLE_TSECR = 5 << 32
# RDMA: a request asking for an ACK (value: its PSN), kept by a hash of the PSN so both captures keep the same
# ones; and an event (value: ROCE_EV_* << 24 | PSN): ACKs kept the same way, so the first ACK of a kept request
# PSN on the reverse queue pair gives the round trip; NAKs, CNPs and resends kept like re-sent rows.
SAMPLE_RDMA_REQUEST = 6 << 32
SAMPLE_RDMA_EVENT = 7 << 32
ROCE_EV_ACK, ROCE_EV_NAK, ROCE_EV_RNR_NAK, ROCE_EV_NAK_ERROR, ROCE_EV_CNP, ROCE_EV_RESENT = 0, 1, 2, 3, 4, 5
# every RDMA WRITE message's first and last packet sent (not again), and each clear-to-send (a WRITE only of at most
# CTS_MAX_BYTES): never thinned, since what a sender did between a receiver's grant and its chunk needs each one
ROCE_EV_CHUNK_START, ROCE_EV_CHUNK_END, ROCE_EV_CTS = 6, 7, 8
# every READ request sent (not again): its PSN, a 24-bit key of the remote buffer its RETH names (virtual address
# and length) and the length (bytes, at most 2^24 - 1); and each READ response's first packet, with the PSN of the
# request it answers: a failover's replay reads an answered buffer again on another device
ROCE_EV_READ, ROCE_EV_READ_KEY, ROCE_EV_READ_LEN, ROCE_EV_READ_ANSWER = 9, 10, 11, 12
ROCE_EVENT_NAMES = (
    *("ack", "nak", "rnr_nak", "nak_error", "cnp", "resent", "chunk_start", "chunk_end", "cts"),
    *("read", "read_key", "read_len", "read_answer"),
)
CTS_MAX_BYTES = 64  # NCCL's IB transport writes a 64-byte FIFO slot per request (RCCL's inline variant 32)
SAMPLE_KIND = 7 << 32  # the kind bits: 0 a data sample, SAMPLE_ACK, _RESENT, _INFLIGHT, _TSVAL, _TSECR, _RDMA_*
SAMPLE_FLOW_SHIFT = 35  # above the value (32 bits) and the kind (3)
SAMPLE_KEY, SAMPLE_NS, N_SAMPLE = 0, 1, 2
# Byte accounting modes.
BYTES_IP = 0
BYTES_WIRE = 1
BYTES_PAYLOAD = 2
BYTE_MODES = {"ip": BYTES_IP, "wire": BYTES_WIRE, "payload": BYTES_PAYLOAD}

# Ethernet framing added per frame in "wire" mode: header 14 + FCS 4 + preamble/SFD 8 + inter-frame gap 12.
ETHERNET_OVERHEAD_BYTES = 38
ETHERNET_MIN_FRAME_BYTES = 64  # header + payload + FCS, padded

MAX_IFACES = 4096

# Record limits and pcapng magics shared by the compiled reader and the resync search (analyze.read.resync).
MAX_RECORD_BYTES = 1 << 20  # a record larger than this is corrupt (tcpdump's maximum snaplen is 256 KiB)
MAX_BLOCK_BYTES = MAX_RECORD_BYTES + 64  # a pcapng block: the record plus its block framing
SHB_TYPE = 0x0A0D0D0A  # Section Header Block: the same bytes in either byte order
BOM_LITTLE, BOM_BIG = 0x1A2B3C4D, 0x4D3C2B1A  # the SHB's byte-order magic, read little-endian

# The compiled entry points' arguments, (numpy dtype, ndim) for arrays or a scalar kind: analyze.read.compiled
# makes both the numba signatures and the ahead-of-time extension's argument check from this one table.
_KERNEL_TABLES = (
    ("uint64", 2),
    ("int64", 1),
    ("int64", 2),
    ("int32", 1),
    ("int64", 1),
    ("int64", 1),
    ("int64", 2),
    ("int64", 1),
    ("uint64", 2),
    ("int64", 1),
    ("int64", 2),
    ("int64", 1),
    ("int64", 2),
    ("int64", 2),
)
KERNEL_DATA = ("uint8", 1)  # the mapped file: read-only
KERNEL_ARGS: dict[str, tuple[object, ...]] = {
    "scan_pcap": (KERNEL_DATA, "int", "bool", "bool", "int", "int", "int", "int", "int", *_KERNEL_TABLES),
    "scan_pcapng": (
        KERNEL_DATA,
        "int",
        "int",
        "int",
        "int",
        "int",
        ("int64", 1),
        ("int64", 1),
        ("int64", 1),
        *_KERNEL_TABLES,
    ),
    "rehash": (("uint64", 2), "int", ("int64", 1)),
}
