"""The fleet tests' progress judge (``fleet_progress``) on a simulated clock: slow is fine, stuck is not."""

from __future__ import annotations

import pytest
from fleet_progress import Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_fleet_that_keeps_advancing_slowly_is_never_failed_however_long_it_takes() -> None:
    clock = FakeClock()
    judge = Progress(stall=90.0, clock=clock)
    for saves in range(80):  # a save every 30 s for 40 minutes: far past any fixed deadline
        judge.check(saves)
        clock.now += 30.0
        judge.check(saves)  # the checks between two saves see no change


def test_a_fleet_with_no_new_save_for_the_stall_window_fails() -> None:
    clock = FakeClock()
    judge = Progress(stall=90.0, clock=clock)
    judge.check(10)
    clock.now = 89.0
    judge.check(10)
    clock.now = 90.0
    with pytest.raises(AssertionError, match="stopped making progress: 10 saves, none for 90s"):
        judge.check(10)


def test_a_measure_that_goes_back_is_not_progress() -> None:
    clock = FakeClock()
    judge = Progress(stall=90.0, clock=clock)
    judge.check(10)
    clock.now = 100.0
    with pytest.raises(AssertionError, match="stopped making progress"):
        judge.check(9)
