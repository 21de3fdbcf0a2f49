"""A store that loses what its durability permits (``ForgetfulStore``: the last second on a
service restart, everything, or an evicted key): the cost is reported apart from the broken
invariants, and it is real (side effects repeat), which is what a store's declared durability
must be checked against before side effects are run on it."""

from __future__ import annotations

from unbroken.testing.simulate import from_text, play
from unbroken.testing.simulate.lossy import ForgetfulStore, evicting
from unbroken.testing.simulate.mutations import MUTATIONS
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


EVICT_THE_RUN = "step p0 6\nevict p0 -1\nstep p1 12"
"""p0 pays; the server evicts the run's head (the last key: the whole run goes); p1 starts it over."""


def test_a_store_whose_server_may_evict_is_refused_at_open_and_nothing_runs() -> None:
    """The world opens a store that declares its settings through the Redis store's own check:
    an ``allkeys-lru`` server is refused with the reason, no side effect runs, nothing breaks."""
    outcome = play(SCENARIO, from_text(EVICT_THE_RUN), evicting)
    assert not outcome.failed and not outcome.after_loss
    assert "maxmemory-policy=allkeys-lru" in outcome.trace[0] and "noeviction" in outcome.trace[0]
    assert len(outcome.trace) == 1  # refused before anything ran


def test_with_the_eviction_check_off_an_evicted_ledger_repeats_a_payment() -> None:
    with MUTATIONS["durability_preconditions"]():
        outcome = play(SCENARIO, from_text(EVICT_THE_RUN), evicting)
    assert "effects_once" in {violation.invariant for violation in outcome.violations}
    assert any(line.startswith("the store evicted") for line in outcome.trace)


def test_a_server_whose_policy_never_evicts_keeps_every_key() -> None:
    store = ForgetfulStore()
    outcome = play(SCENARIO, from_text(EVICT_THE_RUN), lambda: store)
    assert not outcome.failed and not outcome.after_loss
    assert not any("evicted" in line for line in outcome.trace)


LOSE_EVERYTHING_UNDER_A_HOLDER = "step p0 2\nlose p0 everything\nstep p1 3\nstep p0 6\nstep p1 8"
"""p0 holds the run and saved; the store restarts empty; p1 takes the run from nothing; p0, alive
all along, writes again."""


def test_after_the_store_lost_everything_the_old_holders_write_is_refused() -> None:
    """Fences do not restart with the store (``stores.base.next_fence``): p1's fence is above
    p0's, so p0's next write is refused, and no fence is handed out twice."""
    outcome = play(SCENARIO, from_text(LOSE_EVERYTHING_UNDER_A_HOLDER), ForgetfulStore)
    assert not outcome.failed  # fences_unique and no_stale_writes hold even after the loss
    assert any(line.startswith("the store lost everything") for line in outcome.trace)
    assert any(line.startswith("p0 run call raised LeaseLost") and "was refused" in line for line in outcome.trace)


def test_with_fences_counted_from_nothing_the_new_holder_gets_the_old_holders_fence() -> None:
    with MUTATIONS["fence_floor"]():
        outcome = play(SCENARIO, from_text(LOSE_EVERYTHING_UNDER_A_HOLDER), ForgetfulStore)
    assert "fences_unique" in {violation.invariant for violation in outcome.violations}
