"""Link utilization from a sparse binned byte series, with the empty bins counted as zeros.

Series are stored sparse (only bins that carried bytes) so 1 ms bins over an hour stay small; every
statistic here treats the missing bins of the span as idle, exactly as a dense series would.
"""

from __future__ import annotations

import numpy as np

from analyze.model.result import Utilization


DEFAULT_BUSY_THRESHOLD = 0.01  # a bin above this share of line rate is busy (`--busy-threshold`)


def quantile_with_zeros(sorted_values: np.ndarray, zeros: int, q: float) -> float:
    """numpy's linear-interpolated quantile of sorted_values padded with `zeros` leading zeros."""
    total = zeros + len(sorted_values)
    if total == 0:
        return 0.0
    k = q * (total - 1)
    lo, hi = int(np.floor(k)), int(np.ceil(k))

    def at(i: int) -> float:
        return 0.0 if i < zeros else float(sorted_values[i - zeros])

    return at(lo) + (at(hi) - at(lo)) * (k - lo)


def utilization(
    bytes_per_bin: np.ndarray, span_bins: int, bin_ns: int, link_bps: float, busy_threshold: float
) -> Utilization:
    """Summaries of one link direction: mean, busy share, utilization while busy, peak, p50, p99.

    A bin is busy when its rate reaches `busy_threshold` of link speed (ACK streams stay below it).
    """
    span_bins = max(span_bins, len(bytes_per_bin), 1)
    rates = np.sort(bytes_per_bin.astype(np.float64) * 8e9 / bin_ns) / link_bps
    busy = rates[rates >= busy_threshold]
    zeros = span_bins - len(rates)
    return Utilization(
        mean=float(rates.sum() / span_bins),
        busy_fraction=float(len(busy) / span_bins),
        while_busy=float(busy.mean()) if len(busy) else 0.0,
        peak=float(rates[-1]) if len(rates) else 0.0,
        p50=quantile_with_zeros(rates, zeros, 0.50),
        p99=quantile_with_zeros(rates, zeros, 0.99),
    )
