"""The persisted unanswered-call scan marker (``RunState.history_checked``).

A resumed run checks its history for tool calls left without a result only from the marker on.
The marker must never claim a region that was not checked: runs imported, forked, rewound,
recovered or saved at schema 1 start from 0 and are checked whole. Each of those tests plants a
history with an unanswered call in the middle and shows that it is still found (and, first, that
a marker claiming that region would indeed skip it)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest
from core_scripts import final_turn, reading_script

from unbroken import Agent, RunState, Store, crashpoints, open_store, tool
from unbroken.codec import Encoder, encode_full, loads
from unbroken.ops import fork, import_run, recover, rewind
from unbroken.providers.scripted import ScriptedModel
from unbroken.session import HISTORY_CHECK_STEP

RUN = "run-m"


class SimulatedCrash(BaseException):
    """Stands in for SIGKILL: nothing after the crash point runs, nothing catches it."""


class ScanWatcher(ScriptedModel):
    """A scripted model that records the length of every history it is asked to check."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        super().__init__(script)
        self.scans: list[int] = []

    def dangling_call_ids(self, messages: Sequence[Any]) -> list[str]:
        self.scans.append(len(messages))
        return super().dangling_call_ids(messages)


@pytest.fixture
def crash_on_nth() -> Iterator[Any]:
    def arm(label: str, n: int) -> None:
        seen = [0]

        def observer(hit: str) -> None:
            if hit == label:
                seen[0] += 1
                if seen[0] == n:
                    crashpoints.observe(None)
                    raise SimulatedCrash(label)

        crashpoints.observe(observer)

    yield arm
    crashpoints.observe(None)


@tool(effect="read_only")
def read_ticket(ticket_id: str) -> str:
    return f"ticket {ticket_id}"


looked: list[int] = []


@tool(effect="read_only")
def look(n: int) -> str:
    looked.append(n)
    return f"saw {n}"


def test_the_marker_is_saved_in_steps_and_a_resume_scans_only_from_it(crash_on_nth: Any) -> None:
    store = open_store("memory://")
    crash_on_nth("model.before_call", 45)
    with pytest.raises(SimulatedCrash):
        Agent(model=ScriptedModel(reading_script(60)), tools=[read_ticket], store=store, max_turns=100).run(
            "t", run_id=RUN
        )
    saved = store.load(RUN)
    assert HISTORY_CHECK_STEP <= saved.history_checked <= len(saved.messages)
    carrying = [r for r in store.read_records(RUN) if "history_checked" in loads(r.body)["fields"]]
    assert len(carrying) <= 3  # moved in steps, not at every save

    model = ScanWatcher(reading_script(60))
    assert (
        Agent(model=model, tools=[read_ticket], store=store, max_turns=100).run(None, run_id=RUN).status == "completed"
    )
    assert model.scans[0] == len(saved.messages) - saved.history_checked < len(saved.messages)


# --------------------------------------------------------------------------- a region never checked


def dangling_history() -> list[dict[str, Any]]:
    """An unanswered call (``a``) in the middle of an otherwise valid history."""
    return [
        {"role": "user", "content": "t"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "look", "input": {"n": 1}}]},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": "continue"},
    ]


def plant(store: Store, run_id: str, *, claimed: int, version: int = 2) -> None:
    """Run ``run_id`` holding ``dangling_history`` with a marker that claims ``claimed`` messages."""
    history = dangling_history()
    state = RunState(run_id=run_id, task="t", messages=history, save_seq=1, turns=2, schema_version=version)
    state.history_checked = claimed
    store.append(encode_full(state, "start"), expect_seq=0)


def resume(store: Store, run_id: str) -> list[int]:
    looked.clear()
    agent = Agent(model=ScriptedModel([final_turn()] * 3), tools=[look], store=store)
    assert agent.run(None, run_id=run_id).status == "completed"
    return list(looked)


def test_a_marker_that_claims_the_region_skips_it_so_the_tests_below_can_fail() -> None:
    store = open_store("memory://")
    plant(store, "claims", claimed=len(dangling_history()))
    assert resume(store, "claims") == []  # the marker is honoured: nothing before it is scanned
    plant(store, "honest", claimed=0)
    assert resume(store, "honest") == [1]


def test_a_forked_or_rewound_run_is_checked_whole() -> None:
    store = open_store("memory://")
    plant(store, RUN, claimed=len(dangling_history()))
    made = fork(store, RUN, at=1, new_run_id="forked")
    assert store.load(made.run_id).history_checked == 0
    assert resume(store, made.run_id) == [1]

    state = store.load(RUN)  # one more save point, to rewind from
    encoder = Encoder()
    encoder.prime(state)
    state.save_seq, state.business_state = 2, {"noted": True}
    store.append(encoder.encode(state, "noted"), expect_seq=1)
    rewind(store, RUN, to=1)
    assert store.load(RUN).history_checked == 0
    assert resume(store, RUN) == [1]


def test_a_recovered_run_is_checked_whole() -> None:
    store = open_store("memory://")
    plant(store, RUN, claimed=len(dangling_history()))
    state = store.load(RUN)
    encoder = Encoder()
    encoder.prime(state)
    state.save_seq = 2
    torn = replace(encoder.encode(state, "torn"), checksum="00000000")  # save 2 is damaged
    store.append(torn, expect_seq=1)
    recover(store, RUN)
    assert store.load(RUN).history_checked == 0
    assert resume(store, RUN) == [1]


def test_an_imported_history_with_an_unanswered_call_in_the_middle_is_checked_whole() -> None:
    store = open_store("memory://")
    document = {
        "version": 1,
        "task": "t",
        "turns": 2,
        "tokensUsed": 0,
        "messages": dangling_history(),
        "pendingToolUse": None,
    }
    import_run(store, document, run_id=RUN)
    assert store.load(RUN).history_checked == 0
    # (The import itself makes the call pending; answered at the end of the history, it is then
    # found unanswered once more by the whole scan and run again: read-only, as before v2.)
    assert set(resume(store, RUN)) == {1}


def test_a_schema_1_run_is_checked_whole_and_continues_at_schema_2() -> None:
    store = open_store("memory://")
    plant(store, RUN, claimed=0, version=1)
    assert resume(store, RUN) == [1]
    versions = [loads(record.body)["v"] for record in store.read_records(RUN)]
    assert versions[0] == 1 and set(versions[1:]) == {2}
    assert store.load(RUN).schema_version == 2


def test_unbroken_migrate_leaves_a_schema_1_run_as_it_is() -> None:
    from unbroken.ops import plan_migration

    store = open_store("memory://")
    plant(store, RUN, claimed=0, version=1)
    plan = plan_migration(store, RUN)
    assert (plan.version, plan.verdict) == (1, "current")
