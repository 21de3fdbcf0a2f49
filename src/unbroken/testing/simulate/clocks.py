"""Virtual time: the world's one true time, the store service's clock, and a clock per
simulated process (``clock.Clock``) that the simulator steps, skews and freezes.

Nothing here reads the machine's clocks: a schedule runs the same on any machine, at any speed.
"""

from __future__ import annotations

from collections.abc import Callable

EPOCH = 1_800_000_000.0
"""Where simulated wall time starts (a fixed Unix time, so a replay shows the same dates)."""


class ProcessClock:
    """One simulated process's clocks (implements ``unbroken.clock.Clock``).

    ``wall`` is the true time plus this process's offset (stepped forward and back by clock
    faults: no rule may judge a lease on it). ``monotonic`` and the boot clock follow true
    time and never step. ``sleep`` is handed to the world, which moves time on and lets what
    falls due meanwhile happen (heartbeats, other processes' acts in flight)."""

    def __init__(self, now: Callable[[], float], sleep: Callable[[float], None], boot_id: str) -> None:
        self._now = now
        self._sleep = sleep
        self.boot_id = boot_id
        self.wall_offset = 0.0

    def wall(self) -> float:
        return self._now() + self.wall_offset

    def monotonic(self) -> float:
        return self._now() - EPOCH + 1000.0

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._sleep(seconds)

    def boot(self) -> tuple[str, float]:
        return self.boot_id, self._now() - EPOCH + 500.0
