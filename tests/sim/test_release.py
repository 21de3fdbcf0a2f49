"""A simulated run call ends as ``Agent.run``'s does, through ``LeaseGuard.finish(owner_ends=True)``:
the lease is released at once when nothing of the call may act, and, when a tool it started is
still in flight (``owners.still_acting`` counts it: it entered ``guard.acting``), kept until that
tool's act has landed, then released."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from test_data_loss import PAY_ONCE, SCENARIO

from unbroken.stores.memory import InMemoryStore
from unbroken.testing.simulate import from_text
from unbroken.testing.simulate.clocks import EPOCH
from unbroken.testing.simulate.world import World

PAY_TWICE: list[dict[str, Any]] = [
    {
        "content": [
            {"type": "tool_use", "id": "call_0", "name": "pay", "input": {"token": "t0-c0"}},
            {"type": "tool_use", "id": "call_1", "name": "pay", "input": {"token": "t0-c1"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10},
    },
    PAY_ONCE[1],
]
CONCURRENT = replace(SCENARIO, concurrent=(True, False), script=PAY_TWICE)


def test_a_run_call_that_ends_with_nothing_acting_releases_its_lease() -> None:
    store = InMemoryStore()
    world = World(SCENARIO, store)
    try:
        world.play(from_text("step p0 20"), drain_steps=0)
        head = store.backend.read_head("sim-run-0")
        assert world.journal.ends == ["returned"]
        assert head is not None and head.owner is None
    finally:
        world.close()


def test_a_tool_still_in_flight_keeps_the_lease_until_its_act_lands() -> None:
    store = InMemoryStore()
    world = World(CONCURRENT, store)
    try:
        with world._seams():
            for action in from_text("step p0 5\nfault p0 1 write_record:error\nstep p0 1"):
                world.perform(action)
            process = world.processes[0]
            assert world.journal.ends == ["StoreUnavailable"] and process.orphans  # ended, one pay in flight
            held = store.backend.read_head("sim-run-0")
            assert held is not None and held.owner == process.owner
            assert not world.owner_is_dead(process.owner)  # its tool may still act
            world.advance(70)  # past the act's deadline (EPOCH + 60): it lands
            assert world.now - EPOCH == 70 and len(world.services["payments"].journal) == 2
            released = store.backend.read_head("sim-run-0")
            assert released is not None and released.owner is None
            world.stack.append(world.processes[1])  # asked from the same host
            assert world.owner_is_dead(process.owner)
    finally:
        world.close()
