"""``unbroken history`` tells what happened to a call settled after a resume. Found by the
simulator (seed 448 of this branch, before main recorded each settlement in its save): a call
past ``max_attempts`` whose probe said it never took effect was settled as "NOT DONE" in the
ledger; the save recording it was torn, so the next resume answered it from the ledger, and
history, rebuilt from results and ledger, said "settled from the effect ledger (it had run;
not run again)" about a call that never ran. The engine's recorded account must not."""

from __future__ import annotations

from unbroken.stores.memory import InMemoryStore
from unbroken.testing.simulate import from_text
from unbroken.testing.simulate.invariants import check
from unbroken.testing.simulate.world import Scenario, World
from unbroken.watching import settlements

SHIP_THEN_LOOK = [
    {
        "content": [
            {"type": "tool_use", "id": "call_0", "name": "ship", "input": {"token": "t0-c0"}},
            {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"token": "t0-c1"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10},
    },
    {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
]
ONE_ATTEMPT = Scenario(1, ("h0", "h1"), SHIP_THEN_LOOK, agent_options={"max_attempts": 1})

# p1 claims the call and freezes before starting it; p0 takes the run over once p1's lease has
# expired, finds the call past its one attempt, asks the probe (never ran: "NOT DONE"), and the
# save recording that is torn (the ledger entry is written, the record is not); p0 resumes again.
SCHEDULE = """
step p1 2
freeze_at p1 step
step p1 1
advance p1 31
step p0 2
fault p0 1 write_record:torn
step p0 3
step p0 8
"""


def test_history_never_says_a_call_ran_when_it_did_not() -> None:
    store = InMemoryStore()
    world = World(ONE_ATTEMPT, store)
    world.play(from_text(SCHEDULE))
    lines = [line for notes in settlements(store, world.run_ids[0]).values() for line in notes]
    assert world.services["warehouse"].journal == []  # the call never ran
    settled = [line for line in lines if line.startswith("call call_0 (ship)")]
    assert settled and not any("it had run" in line for line in settled), lines
    assert [str(v) for v in check(world)] == []
    world.close()
