"""The checker can fail: with one defence switched off (or a backend broken on purpose), the
simulator finds the hole within a bounded number of seeds, and the shrunk schedule still fails.
The same seeds pass on the code as it is (test_simulate), except the seeds of a known hole."""

from __future__ import annotations

import pytest
from sim_seeds import KNOWN_HOLES, WITHIN

from unbroken.stores.base import Store
from unbroken.stores.memory import InMemoryStore
from unbroken.testing.simulate import shrink
from unbroken.testing.simulate.broken import BROKEN
from unbroken.testing.simulate.mutations import MUTATIONS, store_of
from unbroken.testing.simulate.table import first_failure

SKIP = frozenset(KNOWN_HOLES)
PINNED: dict[str, str] = {
    "grace_inheritance": "test_known_holes.test_without_inheritance_the_side_effect_happens_twice",
    "start_time": "test_reused_pid_schedule.test_judged_by_its_pid_alone_the_dead_holder_blocks_the_resume",
}
"""Switched-off defences too rare in random schedules for the seed budget, each pinned by a
schedule. grace_inheritance was found at seed 87 until the ``move`` episode joined the
schedules (it shifts every seed's draw); now not within the first 250 (its takeover-after-a-
release shape is rare), so its two minimal schedules in test_known_holes show it. judge_again
is drawn since the ``late`` fault joined the schedules (first at seed 49; its minimal schedule
in test_late_lease_write pins it as well). start_time needs the ``reuse`` action (a dead
process's pid given to another program), which random schedules do not draw (drawing it would
shift every seed's draw): its schedule in test_reused_pid_schedule shows it."""


@pytest.mark.parametrize("name", sorted(set(MUTATIONS) - set(PINNED)))
def test_each_switched_off_defence_is_found(name: str) -> None:
    found, _ = first_failure(range(WITHIN), store_of(name), switch=MUTATIONS[name], skip=SKIP)
    assert found is not None, f"{name} switched off went unnoticed for {WITHIN} seeds"
    with MUTATIONS[name]():
        shrunk = shrink(found.seed, found, store_of(name), budget=40)
    assert shrunk.failed and len(shrunk.actions) <= len(found.actions)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_backend_is_caught(name: str) -> None:
    def broken() -> Store:
        return BROKEN[name](InMemoryStore())

    found, _ = first_failure(range(WITHIN), broken, skip=SKIP)
    assert found is not None, f"backend {name} went unnoticed for {WITHIN} seeds"
