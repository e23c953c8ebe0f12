"""Result documents of an older schema, brought to this one before they are read.

Why: a saved result outlives the version that wrote it (`ringscope report RESULT.json` a month later), and the
JSON only changes its keys when its schema version is raised. Schema 2 (issue 46) writes every duration in integer
nanoseconds, where schema 1 wrote the what-if in seconds and round trips in milliseconds or microseconds: its keys
are renamed and its values scaled here, so the typed records have one shape to read.
"""

from __future__ import annotations

from typing import Any

__all__ = ["upgraded"]

# schema 1's key -> (schema 2's key, nanoseconds per unit of the old value). Names are unique enough to rename
# wherever they stand: each is a duration wherever schema 1 wrote it (a ScalingPoint's and a profile's backward_s
# alike; a transport series' rtt_ms and an RDMA series' rtt_us both become rtt_ns).
_RENAMED: dict[str, tuple[str, float]] = {
    **{
        old: (old.removesuffix("_s") + "_ns", 1e9)
        for old in (
            "profiled_backward_s",
            "iteration_time_s",
            "comm_time_s",
            "backward_s",
            "overhead_s",
            "comm_s",
            "iteration_s",
            "period_s",
            "idle_s",
            "window_s",
            "backward_end_s",
            "hidden_comm_s",
            "single_iteration_time_s",
            "latency_s",
            "intra_latency_s",
            "cycle_s",
        )
    },
    **{
        old: (old.replace("_s_", "_ns_"), 1e9)
        for old in ("iteration_s_low", "iteration_s_high", "backward_end_s_low", "backward_end_s_high")
    },
    **{
        old: (old.removesuffix("_ms") + "_ns", 1e6)
        for old in ("rtt_median_ms", "rtt_ms", "zero_window_ms", "rtt_min_ms", "rtt_p99_ms")
    },
    **{old: (old.removesuffix("_us") + "_ns", 1e3) for old in ("ack_rtt_median_us", "rtt_us")},
}


def upgraded(doc: Any, schema: Any) -> Any:
    """DOC (a result's body, or any part of one) as schema 2 writes it, where SCHEMA is 1 (or absent, as in a
    `whatif --json` document from before it carried one); else DOC unchanged."""
    if schema not in (None, 1):
        return doc
    return _renamed(doc)


def _renamed(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, inner in value.items():
            if key in _RENAMED:
                new, scale = _RENAMED[key]
                out[new] = _scaled(inner, scale)
            else:
                out[key] = _renamed(inner)
        return out
    if isinstance(value, list):
        return [_renamed(x) for x in value]
    return value


def _scaled(value: Any, scale: float) -> Any:
    """A duration (or a list of them) in the old unit as integer nanoseconds; None stays None."""
    if isinstance(value, list):
        return [_scaled(x, scale) for x in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return int(round(value * scale))
    return None if isinstance(value, float) else value
