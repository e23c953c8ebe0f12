"""What leaves a conclusion unsure: captures that missed the job, or inferred inputs below the confidence
at which they are stated as fact.

The what-if divides by the iteration count (bytes per iteration, the period, the communication time per
iteration) and assumes the ring the packets showed. When either was inferred from the traffic with a
confidence under CONFIDENT, every number built on it is a guess, and the summary, the JSON and the report
say so before the numbers and name what would make them sure. Read from the result's JSON form, so
`ringscope whatif RESULT.json` obeys it as `ringscope analyze` does.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from analyze.coverage import CAPTURE_PROBLEMS, FIX
from analyze.staircase import CONFIDENT

MAKE_SURE = [
    "iteration markers (run the job under `ringscope capture run`, or set RINGSCOPE_MARKERS; see the README)",
    "--iterations N: the number of training steps the job ran while it was captured",
    "--gradient-bytes S: the model's gradient bytes per step (fp32: 4 x parameters)",
]


def doubt(doc: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """None when the iterations and the topology are sure; else why not, and what would make them sure."""
    because = []
    its = doc.get("iterations")
    if isinstance(its, Mapping) and its.get("count") and its.get("source") != "markers":
        confidence = float(its.get("confidence") or 0.0)
        if confidence < CONFIDENT:
            because.append(
                f"the {its['count']} iterations were inferred from the traffic with confidence "
                f"{confidence:.2f} (stated as fact from {CONFIDENT:.2f})"
            )
            because += [str(n) for n in its.get("notes") or [] if str(n).startswith("DISAGREEMENT")]
    topo = doc.get("topology")
    if isinstance(topo, Mapping) and topo.get("kind") and float(topo.get("confidence") or 0.0) < CONFIDENT:
        because.append(f"the {topo['kind']} topology was inferred with confidence {float(topo['confidence']):.2f}")
    missed = [str(p) for p in doc.get(CAPTURE_PROBLEMS) or []]
    if missed:
        because = missed + because
        return {"because": because, "confidence": 0.0, "would_make_sure": [FIX, *MAKE_SURE]}
    if not because:
        return None
    return {"because": because, "confidence": min(_confidences(doc)), "would_make_sure": MAKE_SURE}


def _confidences(doc: Mapping[str, Any]) -> list[float]:
    out = [
        float((doc.get(k) or {}).get("confidence") or 0.0)
        for k in ("iterations", "topology")
        if isinstance(doc.get(k), Mapping) and (doc.get(k) or {}).get("confidence") is not None
    ]
    return out or [0.0]


def headline(unsure: Mapping[str, Any]) -> str:
    """The one line that goes first: UNSURE and why."""
    return "UNSURE: " + "; ".join(unsure["because"])


__all__ = ["doubt", "headline", "MAKE_SURE"]
