"""Judging a long fleet test by its progress, not by a fixed deadline.

A loaded machine may run the fleet slowly; only a fleet that stopped advancing is stuck. The
judge is fed a measure that only grows while work is done (saves written across all runs) and
fails when it has not grown for ``stall`` seconds: the deadline moves on with every advance.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Progress:
    """Fails (``AssertionError``) when ``check``'s measure has not grown for ``stall`` seconds."""

    def __init__(self, stall: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall = stall
        self.clock = clock
        self.best: int | None = None
        self.since = clock()
        self.started = self.since

    def check(self, measure: int) -> None:
        now = self.clock()
        if self.best is None or measure > self.best:
            self.best, self.since = measure, now
            return
        assert now - self.since < self.stall, (
            f"the fleet stopped making progress: {measure} saves, none for {now - self.since:.0f}s "
            f"({now - self.started:.0f}s since the start)"
        )
