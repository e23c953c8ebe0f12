"""Sums of a value column per distinct tuple of integer codes, in code order, without sorting the rows.

Why its own module: the series cells (a host's (flow, bin) runs) and the per-iteration maps both reduce
hundreds of thousands to millions of rows by small integer keys. An argsort or lexsort of 2 M rows took
0.16 s a call; counting into a key space no larger than a few times the rows is linear, and a bigger
space is hashed (pandas.factorize) so that only its distinct keys are sorted. Imports pandas only on
that path: the read path (analyze.read.pieces) calls this before the caller has loaded pandas.
"""

from __future__ import annotations

import numpy as np

DENSE_KEYS = 4096  # a key space this much above 4x the rows is still counted directly
FLAT_LIMIT = float(1 << 62)  # larger key spaces cannot be flattened into one int64: sorted by columns instead


def group_sum(codes: list[np.ndarray], sizes: list[int], values: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """The key columns of the non-empty groups (each code i in [0, sizes[i])) in code order, and their int64
    sums. A group of rows whose values sum to 0 is still a group. The counted and hashed paths add in float64,
    exact while a group's sum stays below 2**53 (9 PB)."""
    space = float(np.prod(np.asarray(sizes, dtype=np.float64)))
    if space >= FLAT_LIMIT:
        return _sorted_sum(codes, values)
    flat = np.zeros(len(values), dtype=np.int64)
    for c, n in zip(codes, sizes):  # in place: a new array per step held two more copies of the rows
        flat *= n
        flat += c
    if space <= 4 * len(values) + DENSE_KEYS:
        keys = np.flatnonzero(np.bincount(flat, minlength=int(space)))
        sums = np.bincount(flat, weights=values, minlength=int(space))[keys].astype(np.int64)
    else:
        import pandas as pd

        inv, keys = pd.factorize(flat, sort=True)
        sums = np.bincount(inv, weights=values, minlength=len(keys)).astype(np.int64)
    cols, rest = [], np.asarray(keys, dtype=np.int64)
    for n in reversed(sizes):
        cols.append(rest % n)
        rest = rest // n
    return cols[::-1], sums


def _sorted_sum(codes: list[np.ndarray], values: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """group_sum for key spaces past int64: a lexsort of the code columns (exact int64 sums)."""
    if not len(values):
        return [np.zeros(0, np.int64) for _ in codes], np.zeros(0, np.int64)
    order = np.lexsort(codes[::-1])
    cols = [np.asarray(c, dtype=np.int64)[order] for c in codes]
    start = np.zeros(len(order), dtype=bool)
    start[0] = True
    for c in cols:
        start[1:] |= c[1:] != c[:-1]
    idx = np.flatnonzero(start)
    return [c[idx] for c in cols], np.add.reduceat(np.asarray(values, dtype=np.int64)[order], idx)
