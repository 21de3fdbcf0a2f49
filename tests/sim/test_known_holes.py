"""Holes the simulator found, pinned as minimal schedules. While a hole is open its test is an
expected failure (strict); once closed it is a plain regression test (and its seeds leave
sim_seeds.KNOWN_HOLES).

Closed: the grace of rule 3 of docs/effects.md was not inherited. p1 passes its lease check,
then freezes with its act in flight. Its lease expires; p0 takes the run over as an expired
holder's, so p0 would wait before trusting the probe, but p0 then gives the run up without
settling the call: it releases the lease (its run call failed on a store error) or it dies. p2
took the run from a holder that released it, or that it proved dead, trusted the probe's "not
executed" at once and ran the call; p1's act landed within the grace: twice. Now the ledger
entry says p1's fence started the attempt, older than p0's, so p2 waits the full grace
(fencing.LeaseGuard.started_before_predecessor; switched off: mutation grace_inheritance)."""

from __future__ import annotations

import pytest

from unbroken.testing.simulate import from_text, play
from unbroken.testing.simulate.mutations import MUTATIONS
from unbroken.testing.simulate.world import Scenario

SHIP_ONCE = [
    {
        "content": [{"type": "tool_use", "id": "call_0", "name": "pay", "input": {"token": "t0-c0"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    },
    {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
]
ZOMBIE_ELSEWHERE = Scenario(runs=1, hosts=("h0", "h1", "h0"), script=SHIP_ONCE)
"""p1 on another host: p0 cannot prove it alive, so takes the run over once its lease expires (a
frozen holder on p0's own host is provably alive and never taken over: owners.owner_is_alive)."""

ZOMBIE_IN_FLIGHT = """
freeze_at p1 in_tool
step p1 8
advance p0 31
step p0 1
"""


AFTER_A_RELEASE = ZOMBIE_IN_FLIGHT + "fault p0 1 insert_entry:error\nstep p0 1\nstep p2 3"
AFTER_A_DEATH = ZOMBIE_IN_FLIGHT + "kill p0\nstep p2 3"


def test_a_release_does_not_lose_the_grace() -> None:
    outcome = play(ZOMBIE_ELSEWHERE, from_text(AFTER_A_RELEASE))
    assert not outcome.failed, [str(v) for v in outcome.violations]


def test_a_holder_proven_dead_does_not_lose_the_grace() -> None:
    outcome = play(ZOMBIE_ELSEWHERE, from_text(AFTER_A_DEATH))
    assert not outcome.failed, [str(v) for v in outcome.violations]


@pytest.mark.parametrize("schedule", [AFTER_A_RELEASE, AFTER_A_DEATH], ids=["release", "death"])
def test_without_inheritance_the_side_effect_happens_twice(schedule: str) -> None:
    with MUTATIONS["grace_inheritance"]():
        outcome = play(ZOMBIE_ELSEWHERE, from_text(schedule))
    assert any(v.invariant == "effects_once" for v in outcome.violations), [str(v) for v in outcome.violations]


def test_without_the_middle_holder_the_grace_holds() -> None:
    outcome = play(ZOMBIE_ELSEWHERE, from_text(ZOMBIE_IN_FLIGHT + "step p0 8\nstep p2 3"))
    assert not outcome.failed, [str(v) for v in outcome.violations]


ONE_HOST = Scenario(runs=1, hosts=("h0", "h0", "h0"), script=SHIP_ONCE)


@pytest.mark.parametrize("schedule", [AFTER_A_RELEASE, AFTER_A_DEATH], ids=["release", "death"])
def test_a_frozen_holder_on_the_takers_host_is_never_taken_over(schedule: str) -> None:
    # The world answers owners.owner_is_alive as a host does: even with no grace at all, p0 and
    # p2 of p1's host leave its run alone while p1 lives, frozen or not.
    with MUTATIONS["grace"](), MUTATIONS["grace_inheritance"]():
        outcome = play(ONE_HOST, from_text(schedule))
    assert not outcome.failed, [str(v) for v in outcome.violations]
