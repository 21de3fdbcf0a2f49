"""Retrying while a server is unreachable, until a deadline: the one loop the PostgreSQL and
Redis backends share (``retry_for`` in their URLs).

A pause starts at 20 ms and doubles up to half a second, never sleeping past the deadline;
when the deadline has passed the last error becomes the backend's ``StoreUnavailable``. Only
the errors a backend names as transient (a lost connection, a timeout) are retried: any other
error propagates at once. An attempt is told whether an earlier one may have been applied
(``retried``), so a write can look before doing its work again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .. import clock
from ..errors import StoreUnavailable

T = TypeVar("T")

FIRST_PAUSE = 0.02
LONGEST_PAUSE = 0.5


class Deadline:
    """The retry budget of one operation: ``wait(exc)`` sleeps before the next attempt, or
    raises ``unreachable(exc)`` once ``retry_for`` seconds have passed since it was made."""

    def __init__(self, retry_for: float, unreachable: Callable[[BaseException], StoreUnavailable]) -> None:
        self._ends = clock.monotonic() + retry_for
        self._pause = FIRST_PAUSE
        self._unreachable = unreachable

    def wait(self, exc: BaseException) -> None:
        left = self._ends - clock.monotonic()
        if left <= 0:
            raise self._unreachable(exc) from exc
        clock.sleep(min(self._pause, left))
        self._pause = min(self._pause * 2, LONGEST_PAUSE)


def retry_until_deadline(
    attempt: Callable[[bool], T],
    *,
    retry_for: float,
    transient: tuple[type[BaseException], ...],
    unreachable: Callable[[BaseException], StoreUnavailable],
) -> T:
    """``attempt(retried)``, again after each ``transient`` error until ``retry_for`` seconds
    have passed (then ``unreachable(last error)`` is raised from it)."""
    deadline = Deadline(retry_for, unreachable)
    retried = False
    while True:
        try:
            return attempt(retried)
        except transient as exc:
            deadline.wait(exc)
            retried = True
