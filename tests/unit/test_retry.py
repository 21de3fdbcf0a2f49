"""``stores._retry``: the one retry-until-deadline loop of the PostgreSQL and Redis backends,
on a clock that only moves when the loop sleeps."""

from __future__ import annotations

import pytest

from unbroken import clock
from unbroken.errors import StoreUnavailable
from unbroken.stores._retry import retry_until_deadline


class StepClock:
    """A monotonic clock that moves only by ``sleep`` (its sleeps are recorded)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def boot(self) -> tuple[str, float]:
        return "", self.now


class Lost(Exception):
    """A transient driver error (a lost connection)."""


def _unreachable(exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(f"gave up: {exc}")


def test_a_transient_error_is_retried_with_a_growing_pause_and_the_attempt_is_told() -> None:
    seen: list[bool] = []

    def attempt(retried: bool) -> str:
        seen.append(retried)
        if len(seen) < 4:
            raise Lost("connection lost")
        return "done"

    steps = StepClock()
    with clock.using(steps):
        assert retry_until_deadline(attempt, retry_for=10, transient=(Lost,), unreachable=_unreachable) == "done"
    assert seen == [False, True, True, True]
    assert steps.sleeps == [0.02, 0.04, 0.08]


def test_past_the_deadline_the_last_error_becomes_store_unavailable_never_sleeping_past_it() -> None:
    def attempt(retried: bool) -> None:
        raise Lost("still down")

    steps = StepClock()
    with clock.using(steps), pytest.raises(StoreUnavailable, match="gave up: still down") as caught:
        retry_until_deadline(attempt, retry_for=2.0, transient=(Lost,), unreachable=_unreachable)
    assert isinstance(caught.value.__cause__, Lost)
    assert max(steps.sleeps) == 0.5 and sum(steps.sleeps) == pytest.approx(2.0)  # the last pause: what was left


def test_an_error_that_is_not_transient_is_raised_at_once() -> None:
    calls: list[bool] = []

    def attempt(retried: bool) -> None:
        calls.append(retried)
        raise ValueError("a bad statement")

    steps = StepClock()
    with clock.using(steps), pytest.raises(ValueError):
        retry_until_deadline(attempt, retry_for=10, transient=(Lost,), unreachable=_unreachable)
    assert calls == [False] and steps.sleeps == []
