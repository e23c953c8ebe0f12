"""Bytes per iteration without the bytes sent twice, and the gradient size S from them.

Why: on a lossy link TCP re-sends what was lost, and a host's bytes per iteration as captured count those bytes
twice. The ring's 2(N-1)/N x S describes each gradient byte once, so S implied from the bytes as sent came out
too large by the share re-sent (+4.2 % on a real lossy DDP ring, stated as fact). The transport knows, per ring
edge and per iteration, how many bytes its sender re-sent (analyze.wire.transport, from the sender's own
capture); taking them out of the sender's bytes leaves the unique bytes, and S is implied from those. The bytes
as sent stay beside them: they are what the link carried. Edges the transport could not judge (a sender not
captured, UDP) have no re-sent count and keep their bytes as sent.

Which bytes were sent twice is not always known: a segment dropped by the sender's own queue (a tbf or htb qdisc
on its NIC) never reached its capture, which taps after the queue, so its re-sending is the only copy the link
carried. Where S from the unique bytes and S from the bytes as sent differ by more than UNSURE_RESENT, S is
unsure and says why.
"""

from __future__ import annotations

from dataclasses import replace

from analyze.collective.iterations import host_percentiles, per_ring_send, ring_theory
from analyze.collective.topology import RING_KINDS
from analyze.model.result import Result


# S from the unique bytes and from the bytes as sent may differ by this much and S still be sure: beyond, which
# one holds is not known (a 4-host gloo ring on a lossy tbf queue re-sent 8 % and the unique bytes gave S 6.3 %
# low: the qdisc dropped the first sendings before tcpdump saw them; on other runs the capture saw them).
UNSURE_RESENT = 0.02


def leave_out_resent(result: Result) -> None:
    """Set the iterations' unique bytes per host per iteration and, on a ring with re-sent bytes, S from them
    (implied_gradient_bytes, the parameter counts and the theory ratio), with a note saying how much was left
    out. Runs after the transport diagnosis (its per-edge, per-iteration re-sent bytes)."""
    its, topo = result.iterations, result.topology
    if its is None or not its.per_iteration:
        return
    its.unique_bytes_per_iteration_per_host = replace(its.bytes_per_iteration_per_host)
    if topo is None or topo.kind not in RING_KINDS or not topo.edges or result.transport is None:
        return
    if its.pattern is not None and its.pattern.factor is None:
        return  # no bytes theory for this job: no S to correct
    factor = its.pattern.factor if its.pattern is not None else None  # None: a ring all-reduce's
    # the transport numbers iterations by their order in time; so does this list once sorted by start
    order = sorted(range(len(its.per_iteration)), key=lambda i: its.per_iteration[i].start_ns)
    resent: list[dict[str, int]] = [{} for _ in its.per_iteration]
    for edge in result.transport.edges:
        for position, nbytes in zip(edge.per_iteration.index, edge.per_iteration.resent_bytes):
            if nbytes and position < len(order):
                by_host = resent[order[position]]
                by_host[edge.src] = by_host.get(edge.src, 0) + int(nbytes)
    total = sum(sum(r.values()) for r in resent)
    if not total:
        return
    nodes = sorted({e.src for e in topo.edges} | {e.dst for e in topo.edges})
    unique = [
        {h: max(0, it.bytes_by_host.get(h, 0) - gone.get(h, 0)) for h in nodes}
        for it, gone in zip(its.per_iteration, resent)
    ]
    its.unique_bytes_per_iteration_per_host = host_percentiles(unique, nodes)
    median = its.unique_bytes_per_iteration_per_host.median
    per_send = per_ring_send(unique, nodes, its.ring_sends_per_host)
    as_sent = its.implied_gradient_bytes
    theory = ring_theory(per_send, its.ring_size or len(nodes), its.gradient_bytes, factor)
    its.implied_gradient_bytes, its.theory_ratio = theory.implied_gradient_bytes, theory.theory_ratio
    its.implied_params_fp32, its.implied_params_fp16 = theory.implied_params_fp32, theory.implied_params_fp16
    s = its.implied_gradient_bytes
    if as_sent and s and abs(as_sent / s - 1) > UNSURE_RESENT:
        its.implied_gradient_bytes_confidence = min(its.implied_gradient_bytes_confidence or 0.0, 0.5)
        its.notes.append(
            f"S from the unique bytes ({s:,.0f} B) and from the bytes as sent ({as_sent:,.0f} B) differ by "
            f"{abs(as_sent / s - 1):.1%}: S is unsure. A segment a sender's own queue dropped never reached its "
            f"capture, so its re-sending carried bytes the link saw once, not twice; which of the re-sent bytes "
            f"were such is not known"
        )
    per = total / (len(its.per_iteration) * len(nodes))
    its.notes.append(
        f"re-sent bytes left out of S: {total:,} B in all ({per:,.0f} B per host per iteration on average); "
        f"S is implied from the unique bytes, median {median:,.0f} B per host per iteration"
    )
