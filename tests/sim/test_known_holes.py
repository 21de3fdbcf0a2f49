"""Holes the simulator found in the code as it is, pinned as minimal schedules. Each is an
expected failure (strict): once the hole is closed the test passes unexpectedly, and then it
becomes a plain regression test (drop the xfail, and the seed from sim_seeds.KNOWN_HOLES).

Rule 3 of docs/effects.md (after taking over an expired holder, wait out the grace before
believing "not executed") is not inherited. p1 passes its lease check, then freezes with its
act in flight. Its lease expires; p0 takes the run over as an expired holder's, so p0 would
wait before trusting the probe, but p0 then gives the run up without settling the call: it
releases the lease (its run call failed on a store error) or it dies. p2 takes the run from a
holder that released it, or that it proves dead, and trusts the probe's "not executed" at once,
runs the call; p1's act lands within the grace: the side effect happens twice."""

from __future__ import annotations

import pytest

from unbroken.testing.simulate import from_text, play
from unbroken.testing.simulate.world import Scenario

SHIP_ONCE = [
    {
        "content": [{"type": "tool_use", "id": "call_0", "name": "pay", "input": {"token": "t0-c0"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    },
    {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
]
ONE_HOST = Scenario(runs=1, hosts=("h0", "h0", "h0"), script=SHIP_ONCE)

ZOMBIE_IN_FLIGHT = """
freeze_at p1 in_tool
step p1 8
advance p0 31
step p0 1
"""


@pytest.mark.xfail(strict=True, reason="the grace is not inherited by the holder after a release (seeds 658, 1143...)")
def test_a_release_does_not_lose_the_grace() -> None:
    outcome = play(ONE_HOST, from_text(ZOMBIE_IN_FLIGHT + "fault p0 1 insert_entry:error\nstep p0 1\nstep p2 3"))
    assert not outcome.failed, [str(v) for v in outcome.violations]


@pytest.mark.xfail(strict=True, reason="the grace is not inherited by the holder after a dead one")
def test_a_holder_proven_dead_does_not_lose_the_grace() -> None:
    outcome = play(ONE_HOST, from_text(ZOMBIE_IN_FLIGHT + "kill p0\nstep p2 3"))
    assert not outcome.failed, [str(v) for v in outcome.violations]


def test_without_the_middle_holder_the_grace_holds() -> None:
    outcome = play(ONE_HOST, from_text(ZOMBIE_IN_FLIGHT + "step p0 8\nstep p2 3"))
    assert not outcome.failed, [str(v) for v in outcome.violations]
