"""A dead holder's pid given to another program (the ``reuse`` action): the holder is judged by
its pid and the start time in its name, so a resume takes the run over at once. With the start
time left out (mutation start_time) the other program passes for the holder and the resume is
refused for the whole lease (invariant dead_holders_yield). tests/faults/test_pid_reuse.py does
the same with real processes and ``ns_last_pid``."""

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

PID_REUSED = """
# p0 takes the run's lease and is killed holding it
step p0 2
kill p0
# another program gets p0's pid
reuse p0
step p1 1
"""


def test_a_dead_holders_reused_pid_does_not_hold_the_run() -> None:
    outcome = play(ONE_HOST, from_text(PID_REUSED))
    assert not outcome.failed, [str(v) for v in outcome.violations]
    assert any("reused by another program" in line for line in outcome.trace), outcome.trace


def test_judged_by_its_pid_alone_the_dead_holder_blocks_the_resume() -> None:
    with MUTATIONS["start_time"]():
        outcome = play(ONE_HOST, from_text(PID_REUSED))
    assert {v.invariant for v in outcome.violations} == {"dead_holders_yield"}, [str(v) for v in outcome.violations]


def test_judged_by_its_pid_alone_a_dead_holder_whose_pid_is_free_is_still_taken_over() -> None:
    with MUTATIONS["start_time"]():
        outcome = play(ONE_HOST, from_text(PID_REUSED.replace("reuse p0", "")))
    assert not outcome.failed, [str(v) for v in outcome.violations]
