"""A store that loses what its durability permits (``ForgetfulStore``: the last second on a
service restart, everything, or an evicted key): the cost is reported apart from the broken
invariants, and it is real (side effects repeat), which is what a store's declared durability
must be checked against before side effects are run on it."""

from __future__ import annotations

from unbroken.testing.simulate import from_text, play
from unbroken.testing.simulate.lossy import ForgetfulStore
from unbroken.testing.simulate.world import Scenario

PAY_ONCE = [
    {
        "content": [{"type": "tool_use", "id": "call_0", "name": "pay", "input": {"token": "t0-c0"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10},
    },
    {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
]
SCENARIO = Scenario(runs=1, hosts=("h0", "h0"), script=PAY_ONCE)


def test_a_restart_that_loses_the_last_second_repeats_a_side_effect_and_is_reported_apart() -> None:
    schedule = "advance p0 1\nstep p0 6\nlose p0 tail\nstep p1 8"
    outcome = play(SCENARIO, from_text(schedule), ForgetfulStore)
    assert not outcome.failed  # not a broken promise: the store never promised to keep it
    assert {violation.invariant for violation in outcome.after_loss} >= {"effects_once"}
    assert any("lost the writes of the last second" in line for line in outcome.trace)


def test_the_same_schedule_without_the_loss_keeps_every_invariant() -> None:
    outcome = play(SCENARIO, from_text("advance p0 1\nstep p0 6\nstep p1 8"), ForgetfulStore)
    assert not outcome.failed and not outcome.after_loss
