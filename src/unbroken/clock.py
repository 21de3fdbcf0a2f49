"""The one clock: every reading of time in unbroken's rules goes through here.

Three kinds of time, never mixed:

* ``wall()``: seconds since the epoch, for what a person reads (``created_at``, ``updated_at``,
  an approval's age). A wall clock steps (NTP, a VM resume, a person), so no lease, deadline or
  "may the previous holder still act" is ever judged on it.
* ``monotonic()`` and ``sleep()``: this process's clock that never steps, for what this process
  measures itself (the lease time certainly left since a renewal was sent, a timeout, a wait).
* a store's lease clock (``Store.lease_now``: its backend's ``lease_time``): the one clock a
  run's lease is judged by, shared by every process that uses the store (a database's ``now()``, a service's ``Date``,
  or for a local store the boot clock below).

``boot_clock()`` is ``CLOCK_BOOTTIME`` with the boot id: every process of one boot reads the
same value, it counts time suspended, and no step of the wall clock moves it. A reading from
another boot (the id differs) is not comparable: after a reboot, every holder of that boot is
dead. An empty boot id means the system has no such clock (not Linux): its reading is then
this process's monotonic clock, which no other process shares.

A simulator replaces the clock for the code it drives (``using``), so the same code runs in
production and in simulation (``unbroken.testing.simulate``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Clock(Protocol):
    """What a clock provides. ``SystemClock`` is the real one; a simulator supplies another."""

    def wall(self) -> float: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def boot(self) -> tuple[str, float]: ...


def _read_boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot_id:
            return boot_id.read().strip().replace(":", "")
    except OSError:
        return ""


_BOOT_ID = _read_boot_id()


class SystemClock:
    """The machine's clocks."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def boot(self) -> tuple[str, float]:
        try:
            return _BOOT_ID, time.clock_gettime(time.CLOCK_BOOTTIME)
        except (AttributeError, OSError):  # not Linux: no clock shared by the processes of a boot
            return "", time.monotonic()


SYSTEM = SystemClock()
_CURRENT: contextvars.ContextVar[Clock] = contextvars.ContextVar("unbroken_clock", default=SYSTEM)


def current() -> Clock:
    """The clock in force for the calling code."""
    return _CURRENT.get()


def wall() -> float:
    """Seconds since the epoch (for people; never for judging a lease)."""
    return _CURRENT.get().wall()


def monotonic() -> float:
    """This process's clock that never steps (for deadlines this process measures)."""
    return _CURRENT.get().monotonic()


def sleep(seconds: float) -> None:
    """Wait ``seconds`` on the monotonic clock (a simulator advances its own)."""
    _CURRENT.get().sleep(seconds)


def boot_clock() -> tuple[str, float]:
    """(boot id, seconds since boot, suspend included): shared by the processes of one boot."""
    return _CURRENT.get().boot()


@contextmanager
def using(clock: Clock) -> Iterator[Clock]:
    """Run the enclosed code (and what it calls in this context) on ``clock``."""
    token = _CURRENT.set(clock)
    try:
        yield clock
    finally:
        _CURRENT.reset(token)
