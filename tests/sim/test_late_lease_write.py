"""A process killed with its lease write in flight, the write reaching the store after the
process died (the ``late`` fault on ``swap_head``): a resume that read the head just before it
landed meets the dead process's fresh lease at the store's swap. ``leases.take_lease`` judges
that holder again (provably dead: taken over at once); with one judging (mutation judge_again)
the resume is refused for the whole 30 s lease (invariant dead_holders_yield). Found by the
PostgreSQL random-kill sweep in CI; tests/faults/test_lease_write_after_death.py is its unit test."""

from __future__ import annotations

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
ONE_HOST = Scenario(runs=1, hosts=("h0", "h0"), script=SHIP_ONCE)

WRITE_AFTER_DEATH = """
# p0 dies taking the lease; its write lands 1 s later
fault p0 1 swap_head:late
step p0 1
# p1 reads the head (no holder); its call is slow: the dead p0's write lands meanwhile
fault p1 1 read_head:delay_after
step p1 1
"""
"""The minimal schedule (shrunk by hand: drop any line and it passes with the mutation on)."""


def test_a_dead_writers_late_lease_is_taken_over() -> None:
    outcome = play(ONE_HOST, from_text(WRITE_AFTER_DEATH))
    assert not outcome.failed, [str(v) for v in outcome.violations]
    assert any("landed" in line for line in outcome.trace), outcome.trace  # the fault did happen


def test_with_one_judging_the_dead_holder_blocks_the_resume() -> None:
    with MUTATIONS["judge_again"]():
        outcome = play(ONE_HOST, from_text(WRITE_AFTER_DEATH))
    assert [v.invariant for v in outcome.violations] == ["dead_holders_yield"], [str(v) for v in outcome.violations]


def test_a_late_write_that_lands_before_the_read_is_judged_once() -> None:
    # Without the slow read the write lands before p1 reads: the first judgment sees p0 dead.
    with MUTATIONS["judge_again"]():
        outcome = play(ONE_HOST, from_text("fault p0 1 swap_head:late\nstep p0 1\nadvance p0 2\nstep p1 1"))
    assert not outcome.failed, [str(v) for v in outcome.violations]
