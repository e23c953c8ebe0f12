"""The transport limiter of a running capture, for the live view's metrics: the whole analysis, rerun now and then.

Why the whole analysis and not a live shortcut: what keeps a link from line rate (loss, a receive window, the
sender, the link) is read from round trips, windows and re-sent bytes per iteration (analyze.wire.transport); a
second, cheaper reading would be a twin that disagrees with `analyze`. So the capture files as they stand are
analyzed in a child process (its own interpreter: the view's polls and the metrics endpoint keep their core),
again every EVERY_S seconds, or SHARE times as long as the last analysis took when that is longer: a 20th of a core
at most, however long the run grows. A file tcpdump is still writing ends in a part of a record, which the
analysis counts as a warning and reads up to.

One judgment, live or offline (issue 45): on a loaded 2-core machine a half-written capture once read "sender" as
fact where the whole run read "link" at 0.77. Two things made the partial reading another answer. The analysis
took a core from the training it watched, and ranks starved of CPU send slower bursts, which read as the
sender's fault: the child now runs at the lowest CPU priority (NICE), as a sidecar must. And one analysis of the
run so far is one sample: the view states a limiter only as surely as the last two analyses agree on it, the lesser
of their confidences, and holds a reading that just changed (or the first) at CHANGED_CONFIDENCE, unsure.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Optional

FIRST_S = 5.0  # the first analysis, once the capture holds a few iterations
EVERY_S = 15.0
SHARE = 20.0
NICE = 19  # the child's CPU priority: the lowest, so the training keeps the cores it had without the view
CHANGED_CONFIDENCE = 0.5  # a reading no earlier analysis made: one the next one may not repeat


def limiter_of(folders: list[Path]) -> Optional[tuple[str, float]]:
    """(limiter, confidence) of the capture in FOLDERS as it stands; None where it has no diagnosis yet. Runs in
    the child: anything the half-written capture makes the analysis raise means no answer this time."""
    from analyze.api import analyze  # in the child only: the view's own process stays light

    try:
        result = analyze(folders, workers=1)
    except Exception:  # noqa: BLE001  (a growing capture may not be analyzable yet: the next run tries again)
        return None
    transport = result.transport
    if transport is None or not transport.limiter:
        return None
    return transport.limiter, float(transport.confidence)


def _child(folders: list[Path], answer: Connection) -> None:
    os.nice(NICE)
    answer.send(limiter_of(folders))


def agreed(previous: Optional[tuple[str, float]], found: tuple[str, float]) -> tuple[str, float]:
    """The view's limiter after an analysis read FOUND where the one before read PREVIOUS (module docstring)."""
    if previous is None or previous[0] != found[0]:
        return found[0], min(found[1], CHANGED_CONFIDENCE)
    return found[0], min(found[1], previous[1])


class LiveLimiter:
    """The latest limiter of the capture in FOLDERS, refreshed in a child process on the schedule above; close()
    ends a child still analyzing."""

    def __init__(self, folders: list[Path]) -> None:
        self._folders = folders
        self._context = multiprocessing.get_context("spawn")
        self._child: Optional[tuple[BaseProcess, Connection]] = None
        self._started = 0.0
        self._next = time.monotonic() + FIRST_S
        self.latest: Optional[tuple[str, float]] = None  # what the view states: agreed() over the analyses
        self._read: Optional[tuple[str, float]] = None  # the last analysis's own reading

    def poll(self) -> Optional[tuple[str, float]]:
        """Collect a finished analysis, start the next when due; the latest (limiter, confidence) known."""
        now = time.monotonic()
        if self._child is not None:
            proc, answer = self._child
            if answer.poll() or not proc.is_alive():
                try:
                    found = answer.recv() if answer.poll() else None
                except (EOFError, OSError):  # a child that died gave no answer (its pipe reads as closed)
                    found = None
                if found is not None:
                    self.latest, self._read = agreed(self._read, found), found
                self._next = now + max(EVERY_S, SHARE * (now - self._started))
                self._end()
        if self._child is None and now >= self._next:
            ours, theirs = self._context.Pipe(duplex=False)
            proc = self._context.Process(target=_child, args=(self._folders, theirs), daemon=True)
            proc.start()
            theirs.close()
            self._started, self._child = now, (proc, ours)
        return self.latest

    def _end(self) -> None:
        if self._child is not None:
            proc, answer = self._child
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=5)
            answer.close()
            self._child = None

    def close(self) -> None:
        self._end()
