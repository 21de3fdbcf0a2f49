"""The one engine and its two drivers (issue 11.1), and the in-process parts of issue 9.3-9.7:
occurrence keys, non-JSON results, removed tools, async probes, logged exceptions, timeouts,
oversized results. The same test runs ``Agent.run`` and ``Agent.arun`` where both apply."""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from core_scripts import final_turn, tool_turn

from unbroken import (
    Agent,
    Found,
    RecordTooLarge,
    ScriptedModel,
    Store,
    ToolCall,
    crashpoints,
    open_store,
    tool,
)
from unbroken.codec import MAX_RECORD_BYTES
from unbroken.errors import LeaseLost, RunInterrupted
from unbroken.state import Effect

RUN = "engine-run"


class SimulatedCrash(BaseException):
    """Stands in for SIGKILL: nothing after the crash point runs, nothing catches it."""


@pytest.fixture
def crash_at() -> Iterator[Any]:
    def arm(label: str) -> None:
        def observer(hit: str) -> None:
            if hit == label:
                crashpoints.observe(None)
                raise SimulatedCrash(label)

        crashpoints.observe(observer)

    yield arm
    crashpoints.observe(None)


def drive(agent: Agent, driver: str, task: str | None = "t", **options: Any) -> Any:
    if driver == "async":
        return asyncio.run(agent.arun(task, run_id=RUN, **options))
    return agent.run(task, run_id=RUN, **options)


def answers(store: Store) -> list[dict[str, Any]]:
    """Every tool_result block of the run's history, in order."""
    messages = store.load(RUN).messages
    return [b for m in messages if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]]


DRIVERS = pytest.mark.parametrize("driver", ["sync", "async"])


# ---------------------------------------------------------------------- one engine, immutable agent


def test_run_and_arun_make_the_same_saves_and_history(tmp_path: Path) -> None:
    @tool(effect="read_only")
    def look(name: str) -> str:
        return f"saw {name}"

    @tool
    def send(to: str) -> str:
        return f"sent to {to}"

    script = [tool_turn(("t1", "look", {"name": "a"}), ("t2", "send", {"to": "b"}), ("t3", "nope", {})), final_turn()]
    seen = {}
    for driver in ("sync", "async"):
        store = open_store(f"sqlite:///{tmp_path / driver}.db")
        drive(Agent(model=ScriptedModel(script), tools=[look, send], store=store), driver)
        seen[driver] = ([s.label for s in store.history(RUN)], store.load(RUN).messages)
    assert seen["sync"] == seen["async"]


def test_an_agent_is_immutable_and_replace_gives_a_changed_copy(store: Store) -> None:
    agent = Agent(model=ScriptedModel([final_turn()]), store=store, max_turns=5)
    with pytest.raises(AttributeError, match="immutable"):
        agent.max_turns = 6
    with pytest.raises(TypeError):
        agent.tools["x"] = agent.tools.get("x")  # type: ignore[index]
    other = open_store("memory://")
    moved = agent.replace(store=other)
    assert (moved.store, moved.max_turns, agent.store) == (other, 5, store)


def test_per_run_store_and_stop_signal_are_arguments_of_run(store: Store) -> None:
    elsewhere = open_store("memory://")
    agent = Agent(model=ScriptedModel([tool_turn(("t1", "noop", {})), final_turn()]), tools=[noop], store=store)
    stop = threading.Event()
    stop.set()
    with pytest.raises(RunInterrupted):
        agent.run("t", run_id=RUN, store=elsewhere, stop=stop)
    assert not store.exists(RUN) and elsewhere.exists(RUN)
    assert agent.run(run_id=RUN, store=elsewhere).status == "completed"


@tool(effect="read_only")
def noop() -> str:
    """Do nothing."""
    return "ok"


# ---------------------------------------------------------------------- call ids (9.6)


@DRIVERS
def test_two_calls_with_one_id_in_one_turn_each_run_once_with_their_own_result(store: Store, driver: str) -> None:
    sent: list[str] = []

    @tool
    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    script = [tool_turn(("call_0", "send", {"to": "a"}), ("call_0", "send", {"to": "b"})), final_turn()]
    assert drive(Agent(model=ScriptedModel(script), tools=[send], store=store), driver).status == "completed"
    assert sorted(sent) == ["a", "b"]
    assert [block["content"] for block in answers(store)] == ["sent to a", "sent to b"]
    assert len({entry.key for entry in store.ledger_list(RUN)}) == 2


# ---------------------------------------------------------------------- attempts (9.4)


@DRIVERS
def test_max_attempts_is_configurable(store: Store, driver: str, crash_at: Any) -> None:
    ran: list[str] = []

    @tool(effect="read_only")
    def look() -> str:
        ran.append("look")
        return "seen"

    script = [tool_turn(("t1", "look", {})), final_turn()]
    crash_at("tool.after_execute")
    with pytest.raises(SimulatedCrash):
        Agent(model=ScriptedModel(script), tools=[look], store=store).run("t", run_id=RUN)
    result = drive(Agent(model=ScriptedModel(script), tools=[look], store=store, max_attempts=1), driver)
    assert result.status == "completed" and ran == ["look"]
    (answer,) = answers(store)
    assert answer["is_error"] and answer["content"].startswith("NOT RUN AGAIN")
    assert result.reconciled == [("t1", "look", "attempts_exhausted")]  # the structured marker


@DRIVERS
@pytest.mark.parametrize(
    ("effect", "point"), [("read_only", "tool.before_execute"), ("idempotent", "ledger.before_intent")]
)
def test_crashes_before_a_tool_starts_do_not_use_up_its_attempts(
    store: Store, driver: str, crash_at: Any, effect: Effect, point: str
) -> None:
    ran: list[str] = []

    @tool(effect=effect)
    def look() -> str:
        ran.append("look")
        return "seen"

    script = [tool_turn(("t1", "look", {})), final_turn()]
    agent = Agent(model=ScriptedModel(script), tools=[look], store=store, max_attempts=2)
    for _ in range(4):  # the first run and three resumes die before the tool starts
        crash_at(point)
        with pytest.raises(SimulatedCrash):
            drive(agent, driver)
    result = drive(agent, driver)
    assert result.status == "completed" and ran == ["look"]
    (answer,) = answers(store)
    assert answer["content"] == "seen"


@DRIVERS
@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_tools_own_lease_lost_ends_the_run_and_leaves_its_intent_pending(
    store: Store, driver: str, timeout: float | None
) -> None:
    @tool(timeout=timeout)
    def send(to: str) -> str:
        raise LeaseLost("the fenced mail service refused our fence")

    script = [tool_turn(("t1", "send", {"to": "a"})), final_turn()]
    with pytest.raises(LeaseLost):
        drive(Agent(model=ScriptedModel(script), tools=[send], store=store), driver)
    (entry,) = store.ledger_list(RUN)
    assert entry.status == "pending" and store.load(RUN).pending_calls


# ---------------------------------------------------------------------- newcomer trial (9.7)


@DRIVERS
def test_a_side_effect_returning_a_non_json_value_is_recorded_as_succeeded(store: Store, driver: str) -> None:
    @tool
    def book(day: str) -> Any:
        return {"booked": datetime.date(2026, 12, 1)}

    script = [tool_turn(("t1", "book", {"day": "tuesday"})), final_turn()]
    drive(Agent(model=ScriptedModel(script), tools=[book], store=store), driver)
    (answer,) = answers(store)
    assert "is_error" not in answer
    assert '{"booked": "2026-12-01"}' in answer["content"] and "not plain JSON" in answer["content"]
    (entry,) = store.ledger_list(RUN)
    assert entry.status == "succeeded"


@DRIVERS
def test_a_removed_tool_with_a_pending_call_is_an_unknown_outcome(store: Store, driver: str, crash_at: Any) -> None:
    @tool
    def send(to: str) -> str:
        return f"sent to {to}"

    script = [tool_turn(("t1", "send", {"to": "a"})), final_turn()]
    crash_at("tool.after_execute")
    with pytest.raises(SimulatedCrash):
        Agent(model=ScriptedModel(script), tools=[send], store=store).run("t", run_id=RUN)
    result = drive(Agent(model=ScriptedModel(script), tools=[noop], store=store), driver, task=None)
    assert result.status == "completed"
    (answer,) = answers(store)
    assert answer["content"].startswith("UNKNOWN OUTCOME") and "no longer defined" in answer["content"]
    assert "not executed" not in answer["content"]
    (entry,) = store.ledger_list(RUN)
    assert entry.status == "unknown"


@DRIVERS
def test_an_async_probe_is_awaited(store: Store, driver: str, crash_at: Any) -> None:
    async def outbox(call: ToolCall) -> Found:
        await asyncio.sleep(0)
        return Found("sent to a (found in the outbox)")

    @tool(probe=outbox)
    def send(to: str) -> str:
        return f"sent to {to}"

    script = [tool_turn(("t1", "send", {"to": "a"})), final_turn()]
    crash_at("tool.after_execute")
    with pytest.raises(SimulatedCrash):
        Agent(model=ScriptedModel(script), tools=[send], store=store).run("t", run_id=RUN)
    result = drive(Agent(model=ScriptedModel(script), tools=[send], store=store), driver, task=None)
    assert result.reconciled == [("t1", "send", "probed")]
    (answer,) = answers(store)
    assert answer["content"] == "sent to a (found in the outbox)"


def test_a_sync_probe_under_arun_runs_off_the_event_loop(store: Store, crash_at: Any) -> None:
    # A probe asks another system (an outbox, a payments API): a round trip the loop must not wait on.
    asked_in: list[int] = []

    def outbox(call: ToolCall) -> Found:
        asked_in.append(threading.get_ident())
        return Found("sent to a (found in the outbox)")

    @tool(probe=outbox)
    def send(to: str) -> str:
        return f"sent to {to}"

    script = [tool_turn(("t1", "send", {"to": "a"})), final_turn()]
    crash_at("tool.after_execute")
    with pytest.raises(SimulatedCrash):
        Agent(model=ScriptedModel(script), tools=[send], store=store).run("t", run_id=RUN)
    loop_thread: list[int] = []

    async def resume() -> Any:
        loop_thread.append(threading.get_ident())
        return await Agent(model=ScriptedModel(script), tools=[send], store=store).aresume(RUN)

    result = asyncio.run(resume())
    assert result.reconciled == [("t1", "send", "probed")]
    assert len(asked_in) == 1 and asked_in != loop_thread


@DRIVERS
def test_a_tool_exception_is_logged_with_its_type_and_message_and_its_traceback_at_debug(
    store: Store, driver: str, caplog: pytest.LogCaptureFixture
) -> None:
    # (was: the traceback at ERROR; a traceback repeats the message whole, secrets included:
    # issue 23 keeps it at DEBUG and logs a short, redacted message at ERROR)
    @tool(effect="read_only")
    def broken() -> str:
        raise ValueError("the disk is full")

    script = [tool_turn(("t1", "broken", {})), final_turn()]
    with caplog.at_level(logging.DEBUG, logger="unbroken"):
        drive(Agent(model=ScriptedModel(script), tools=[broken], store=store), driver)
    error, debug = [r for r in caplog.records if r.name == "unbroken" and "broken" in r.getMessage()]
    assert error.levelno == logging.ERROR and "ValueError: the disk is full" in error.getMessage()
    assert error.exc_info is None
    assert debug.levelno == logging.DEBUG and debug.exc_info is not None and debug.exc_info[0] is ValueError
    (answer,) = answers(store)
    assert answer["content"] == "ValueError: the disk is full" and answer["is_error"]


@DRIVERS
def test_a_hung_side_effect_past_its_timeout_is_an_unknown_outcome(store: Store, driver: str) -> None:
    release = threading.Event()

    @tool(timeout=0.2)
    def transfer(amount: int) -> str:
        release.wait(10)
        return "transferred"

    @tool(effect="read_only", timeout=0.2)
    def look() -> str:
        release.wait(10)
        return "seen"

    script = [tool_turn(("t1", "transfer", {"amount": 5}), ("t2", "look", {})), final_turn()]
    try:
        result = drive(Agent(model=ScriptedModel(script), tools=[transfer, look], store=store), driver)
    finally:
        release.set()
    assert result.status == "completed"
    transferred, looked = answers(store)
    assert transferred["content"].startswith("UNKNOWN OUTCOME") and "timeout of 0.2 s" in transferred["content"]
    assert looked["is_error"] and looked["content"].startswith("TIMED OUT")
    (entry,) = store.ledger_list(RUN)
    assert entry.status == "unknown"


def test_a_timeout_must_be_positive() -> None:
    from unbroken import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match="timeout"):
        tool(timeout=0)(lambda: "x")


# ---------------------------------------------------------------------- every save loads (9.3)

BIG = 40 * 1024 * 1024


def big_turn_agent(store: Store, **options: Any) -> Agent:
    @tool(effect="read_only")
    def dump(part: str) -> str:
        return part * BIG

    script = [tool_turn(("t1", "dump", {"part": "a"}), ("t2", "dump", {"part": "b"})), final_turn()]
    return Agent(model=ScriptedModel(script), tools=[dump], store=store, **options)


def test_two_40_mb_results_in_one_turn_are_cut_and_the_run_loads(sqlite_store: Store) -> None:
    assert big_turn_agent(sqlite_store).run("t", run_id=RUN).status == "completed"
    first, second = answers(sqlite_store)
    for block, letter in ((first, "a"), (second, "b")):
        assert block["content"].startswith(letter * 1000)
        assert len(block["content"]) < 5 * 1024 * 1024
        assert "the call succeeded; its output was 41,943,040 bytes and was cut" in block["content"]


def test_a_save_over_the_record_cap_is_refused_before_anything_is_written(sqlite_store: Store) -> None:
    with pytest.raises(RecordTooLarge, match=f"{MAX_RECORD_BYTES:,}-byte record cap"):
        big_turn_agent(sqlite_store, max_result_bytes=None).run("t", run_id=RUN)
    state = sqlite_store.load(RUN)  # every acknowledged save still loads
    assert state.phase == "running_tools" and len(state.results) == 1


def test_a_run_saved_with_results_by_call_id_loads_them_by_its_saved_keys() -> None:
    from unbroken import RunState, ToolResult
    from unbroken.state import idempotency_key

    old_key = idempotency_key(RUN, "t1")  # how keys were made before they named occurrences
    state = RunState(run_id=RUN, task="t", phase="running_tools")
    state.pending_calls = [ToolCall("t1", "look", {}, old_key), ToolCall("t2", "look", {}, idempotency_key(RUN, "t2"))]
    fields = state.small_fields()
    fields["results"] = {"t1": ToolResult("t1", "seen").to_json()}  # keyed by call id, as saved then
    loaded = RunState.from_parts(fields, [])
    assert loaded.results == {old_key: ToolResult("t1", "seen")}
    assert [call.id for call in loaded.dangling_calls()] == ["t2"]


def test_dangling_calls_that_reuse_one_id_in_a_damaged_history_each_run_once_with_their_own_arguments() -> None:
    from unbroken import RunState
    from unbroken.codec import encode_full

    def asked(n: int) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_0", "name": "look", "input": {"n": n}}],
        }

    # Two turns without results, both with the id "call_0" (a provider that reuses ids).
    history: list[Any] = [{"role": "user", "content": "t"}, asked(1), {"role": "user", "content": "go on"}, asked(2)]
    store = open_store("memory://")
    store.append(
        encode_full(RunState(run_id=RUN, task="t", messages=history, save_seq=1, turns=2), "start"), expect_seq=0
    )
    seen: list[int] = []

    @tool(effect="read_only")
    def look(n: int) -> str:
        seen.append(n)
        return f"saw {n}"

    script = [final_turn()] * 3  # answers are picked by the assistant turns in the history
    result = Agent(model=ScriptedModel(script), tools=[look], store=store).run(None, run_id=RUN)
    assert result.status == "completed" and sorted(seen) == [1, 2]
    assert [block["content"] for block in answers(store)] == ["saw 1", "saw 2"]
