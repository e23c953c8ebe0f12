"""The lines every analysis draws the same way, in one place: when an inference is stated as fact, and when a
transport fills the link it has.

Both are shared verdicts, not tuning knobs of one module. The iteration count, the ring and the what-if resting on
them are stated as fact only at or above CONFIDENT (tests/collective/test_staircase.py checks on randomized series
that every count at or above it is right). A transport that moves data at or above FILLS_LINK of line rate while
it sends is limited by the link itself: the transport diagnosis names the link as the limiter there, and the
what-if's verdict says the transport uses the link it has. Two copies of that 0.8 once drifted apart in reading.
"""

from __future__ import annotations

CONFIDENT = 0.8  # at or above: stated as fact; below, the summary, the JSON and the verdict say it is unsure
FILLS_LINK = 0.8  # rate while sending at or above this share of line rate: the link itself limits the transfer
# iterations found in the traffic at fewer bins each are unsure: a pause and a send a bin or two long cannot be told
# from a bucket shorter than a bin (the staircase's confidence; the doubt names the --bin that resolves them)
SURE_STEP_BINS = 6
# a sure slow link holding the ring back by this share of its step or more paces the ring: it answers the verdict
# (analyze.verdict) and leaves the what-if's compute unsure (analyze.confidence.doubt)
SLOW_LINK_SHARE = 0.05
