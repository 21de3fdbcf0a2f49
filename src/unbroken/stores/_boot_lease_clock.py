"""The lease clock of a store that serves one machine (SQLite, the file store, memory): the boot clock.

A lease on such a store is judged by ``clock.boot_clock()`` (CLOCK_BOOTTIME): every process of
one boot reads the same value, it never steps, and no step of the wall clock (NTP, a VM resume,
a person) moves it. Its readings are stored as one number, so the head keeps its shape:

    lease time = boot number x 10^10 + seconds since boot

The boot number is given by the store to each boot id the first time a process of that boot
asks (1, 2, 3, ... in the order boots first used the store; SQLite keeps them in
``unbroken_meta``, the file store in ``lease-clock/``). A later boot has a larger number, so a
lease written in an earlier boot is always expired: after a reboot, every holder of that boot
is dead. 10^10 s is 317 years of uptime. A lease written by an unbroken older than this clock
(a Unix time, below 10^10) is expired too; a live holder of this host is still protected by the
owner rule (``owners.owner_is_alive``). Where the system gives no boot id (not Linux), the lease
clock is the wall clock, as before (a documented limit: docs/guarantees.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .. import clock

BOOT_SPAN = 1e10
"""Seconds of one boot's range on the lease clock."""


class BootLeaseClock:
    """Reads the lease clock; ``number_boot`` gives a boot id its boot number (persisted by the
    store, the same answer for every process). None: an in-process store numbers boots itself."""

    def __init__(self, number_boot: Callable[[str], int] | None = None) -> None:
        self._number_boot = number_boot
        self._numbers: dict[str, int] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        boot, seconds = clock.boot_clock()
        if not boot:
            return clock.wall()  # no boot clock here: the wall clock, as before
        with self._lock:
            number = self._numbers.get(boot)
        if number is None:
            number = self._number_boot(boot) if self._number_boot is not None else len(self._numbers) + 1
            with self._lock:
                number = self._numbers.setdefault(boot, number)
        return number * BOOT_SPAN + seconds
