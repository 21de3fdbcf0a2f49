"""The agent loop: save points, resume, counters, loop behaviour (issue: core)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

import pytest
from core_scripts import TOKENS_PER_TURN, final_turn, reading_script, tool_turn

from unbroken import (
    Agent,
    ConfigError,
    IncompatibleSchema,
    LeaseHeld,
    ModelCallFailed,
    ModelTurn,
    RunNotFound,
    ScriptedModel,
    Store,
    TaskMismatch,
    ToolCall,
    ToolSpec,
    current_lease,
    open_store,
    tool,
)


@tool(effect="read_only")
def read_ticket(ticket_id: str) -> str:
    """Read one support ticket."""
    return f"ticket {ticket_id}: the printer is on fire"


class FlakyModel(ScriptedModel):
    """A scripted model whose n-th call (1-based, counted per instance) raises."""

    def __init__(self, responses: Sequence[dict[str, Any]], fail_on: set[int]) -> None:
        super().__init__(responses)
        self.fail_on = fail_on

    def complete(self, messages: Sequence[Any], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        if self.calls + 1 in self.fail_on:
            self.calls += 1
            raise ConnectionError("the network went away")
        return super().complete(messages, tools, system)


class ExplodingModel(ScriptedModel):
    def complete(self, messages: Sequence[Any], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        raise AssertionError("the model must not be called")


def test_run_completes_with_output_turns_and_tokens(store: Store) -> None:
    agent = Agent(model=ScriptedModel(reading_script(3)), tools=[read_ticket], store=store)
    result = agent.run("Summarize the tickets", run_id="q3-report")
    assert (result.status, result.output, result.turns) == ("completed", "All done.", 4)
    assert result.tokens_used == 4 * TOKENS_PER_TURN
    loaded = store.load("q3-report")
    assert loaded.phase == "completed"
    assert loaded.usage == {"input_tokens": 400, "output_tokens": 80, "cache_read_input_tokens": 20}


def test_messages_round_trip_exactly_with_unknown_blocks_in_order(store: Store) -> None:
    odd_turn = tool_turn(("toolu_1", "read_ticket", {"ticket_id": "T1"}))
    odd_turn["content"].insert(0, {"type": "from_the_future", "payload": {"nested": [1, 2.5, None, True, "é"]}})
    odd_turn["content"].append({"type": "redacted_thinking", "data": "EqQBCkYIARgCIkD"})
    script = [odd_turn, final_turn("done")]
    Agent(model=ScriptedModel(script), tools=[read_ticket], store=store).run("task", run_id="r1")
    messages = store.load("r1").messages
    assert messages[0] == {"role": "user", "content": "task"}
    assert messages[1] == {"role": "assistant", "content": odd_turn["content"]}
    assert [block["type"] for block in messages[1]["content"]] == [
        "from_the_future",
        "thinking",
        "text",
        "tool_use",
        "redacted_thinking",
    ]
    assert messages[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ticket T1: the printer is on fire"}],
    }
    assert messages[3] == {"role": "assistant", "content": script[1]["content"]}


def test_each_turn_has_save_point_a_then_b(store: Store) -> None:
    Agent(model=ScriptedModel(reading_script(2)), tools=[read_ticket], store=store).run("t", run_id="r")
    labels = [save.label for save in store.history("r")]
    assert labels == ["start", "model_turn", "tools_done", "model_turn", "tools_done", "completed"]
    phases = [save.phase for save in store.history("r")]
    assert phases[1] == "running_tools" and phases[2] == "awaiting_model"


def test_save_point_a_records_pending_calls_with_idempotency_keys(store: Store) -> None:
    seen: list[ToolCall] = []

    @tool(effect="idempotent")
    def put(key: str, *, call: ToolCall) -> str:
        seen.append(call)
        raise SystemExit("simulated death while the tool runs")

    script = [tool_turn(("toolu_9", "put", {"key": "k"})), final_turn()]
    with pytest.raises(SystemExit):
        Agent(model=ScriptedModel(script), tools=[put], store=store).run("t", run_id="r")
    state = store.load("r")
    assert state.phase == "running_tools"
    assert [c.id for c in state.pending_calls] == ["toolu_9"]
    assert state.pending_calls[0].idempotency_key == seen[0].idempotency_key
    assert state.pending_calls[0].idempotency_key.startswith("ub_")


def test_each_result_of_a_turn_is_durable_as_soon_as_it_is_recorded(store: Store) -> None:
    executed: list[str] = []

    @tool(effect="read_only")
    def read(name: str) -> str:
        if name == "c" and len(executed) == 2:
            executed.append("c-died")
            raise SystemExit("killed while running the third call")
        executed.append(name)
        return f"read {name}"

    script = [tool_turn(("t1", "read", {"name": "a"}), ("t2", "read", {"name": "b"}), ("t3", "read", {"name": "c"}))]
    script.append(final_turn())
    with pytest.raises(SystemExit):
        Agent(model=ScriptedModel(script), tools=[read], store=store).run("t", run_id="r")
    state = store.load("r")
    assert sorted(result.call_id for result in state.results.values()) == ["t1", "t2"]
    assert [save.label for save in store.history("r")][-2:] == ["tool_result", "tool_result"]
    result = Agent(model=ScriptedModel(script), tools=[read], store=store).run("t", run_id="r")
    assert result.status == "completed"
    assert executed == ["a", "b", "c-died", "c"], "the two recorded results must not run again"
    answers = store.load("r").messages[2]["content"]
    assert [a["tool_use_id"] for a in answers] == ["t1", "t2", "t3"]


def test_tool_exception_becomes_an_is_error_result_the_model_sees(store: Store) -> None:
    @tool(effect="read_only")
    def broken(x: int) -> str:
        raise ValueError(f"cannot handle {x}")

    script = [tool_turn(("t1", "broken", {"x": 7})), final_turn("recovered")]
    result = Agent(model=ScriptedModel(script), tools=[broken], store=store).run("t", run_id="r")
    assert result.status == "completed"
    answer = store.load("r").messages[2]["content"][0]
    assert answer == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "ValueError: cannot handle 7",
        "is_error": True,
    }


def test_unknown_tool_and_bad_input_get_is_error_results_and_never_execute(store: Store) -> None:
    script = [
        {
            "content": [
                {"type": "tool_use", "id": "t1", "name": "no_such_tool", "input": {}},
                {"type": "tool_use", "id": "t2", "name": "read_ticket", "input": "not an object"},
            ],
            "stop_reason": "tool_use",
            "usage": {},
        },
        final_turn(),
    ]
    Agent(model=ScriptedModel(script), tools=[read_ticket], store=store).run("t", run_id="r")
    answers = store.load("r").messages[2]["content"]
    assert all(a["is_error"] for a in answers)
    assert "no tool named 'no_such_tool'" in answers[0]["content"]
    assert "not an object" in answers[1]["content"]


def test_model_exception_leaves_the_run_resumable_at_its_last_save_point(store: Store) -> None:
    model = FlakyModel(reading_script(3), fail_on={3})
    agent = Agent(model=model, tools=[read_ticket], store=store)
    with pytest.raises(ModelCallFailed, match="network went away"):
        agent.run("t", run_id="r")
    state = store.load("r")
    assert (state.phase, state.turns, state.tokens_used) == ("awaiting_model", 2, 2 * TOKENS_PER_TURN)
    result = agent.run("t", run_id="r")
    assert (result.status, result.turns, result.tokens_used) == ("completed", 4, 4 * TOKENS_PER_TURN)
    assert result.resumed


def test_max_turns_counts_across_resumes(store: Store) -> None:
    model = FlakyModel(reading_script(10), fail_on={2, 4, 6, 8, 10, 12})
    agent = Agent(model=model, tools=[read_ticket], store=store, max_turns=3)
    outcomes = []
    for _ in range(10):
        try:
            outcomes.append(agent.run("t", run_id="r").status)
            break
        except ModelCallFailed:
            outcomes.append("crashed")
    assert outcomes[-1] == "max_turns"
    assert store.load("r").turns == 3


def test_a_finished_run_returns_its_stored_result_without_calling_the_model(store: Store) -> None:
    Agent(model=ScriptedModel(reading_script(1)), tools=[read_ticket], store=store).run("t", run_id="r")
    again = Agent(model=ExplodingModel([]), tools=[read_ticket], store=store).run("t", run_id="r")
    assert (again.status, again.output, again.turns) == ("completed", "All done.", 2)


def test_a_different_task_under_an_existing_run_id_is_refused(store: Store) -> None:
    agent = Agent(model=ScriptedModel(reading_script(1)), tools=[read_ticket], store=store)
    agent.run("the first task", run_id="r")
    before = store.load("r")
    with pytest.raises(TaskMismatch, match="already exists"):
        agent.run("another task", run_id="r")
    assert store.load("r") == before


def test_resuming_without_a_task_needs_an_existing_run(store: Store) -> None:
    agent = Agent(model=ScriptedModel(reading_script(1)), tools=[read_ticket], store=store)
    with pytest.raises(RunNotFound):
        agent.run(run_id="nothing-here")


def test_snapshots_are_periodic_and_deltas_fold_to_the_same_state(store: Store) -> None:
    Agent(model=ScriptedModel(reading_script(6)), tools=[read_ticket], store=store, snapshot_every=4).run(
        "t", run_id="r"
    )
    flags = [save.snapshot for save in store.history("r")]
    assert flags[0] and not all(flags) and sum(flags) >= 3
    assert flags[-1], "entering a terminal phase writes a full snapshot"
    other = Agent(model=ScriptedModel(reading_script(6)), tools=[read_ticket], store=store, snapshot_every=1)
    other.run("t", run_id="s")
    left, right = store.load("r"), store.load("s")
    assert left.messages == right.messages
    assert (left.turns, left.tokens_used, left.phase, left.save_seq) == (
        right.turns,
        right.tokens_used,
        right.phase,
        right.save_seq,
    )


def test_tools_get_a_json_schema_from_type_hints_and_the_call() -> None:
    @tool(effect="idempotent")
    def write(path: str, lines: list[str], mode: Literal["a", "w"] = "w", *, call: ToolCall) -> str:
        """Write lines to a file."""
        return call.idempotency_key

    assert write.description == "Write lines to a file."
    assert write.input_schema == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "lines": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["a", "w"]},
        },
        "required": ["path", "lines"],
    }
    assert write.takes_call and write.effect == "idempotent"


def test_an_undeclared_function_is_a_side_effect() -> None:
    def send(to: str) -> str:
        return to

    agent = Agent(model=ScriptedModel([final_turn()]), tools=[send], store=open_store("memory://"))
    assert agent.tools["send"].effect == "side_effect"


def test_scripted_model_answers_by_the_number_of_assistant_messages() -> None:
    script = reading_script(2)
    model = ScriptedModel(script)
    history: list[Any] = [{"role": "user", "content": "t"}]
    first = model.complete(history, [], None)
    assert first.tool_calls[0].id == "toolu_000"
    history += [*first.messages, {"role": "user", "content": []}]
    assert model.complete(history, [], None).tool_calls[0].id == "toolu_001"
    assert ScriptedModel(script).complete(history, [], None).tool_calls[0].id == "toolu_001"


def test_arun_runs_the_calls_of_one_turn_concurrently(store: Store) -> None:
    started: dict[str, asyncio.Event] = {}

    @tool(effect="read_only")
    async def wait_for(me: str, other: str) -> str:
        started.setdefault(me, asyncio.Event()).set()
        await asyncio.wait_for(started.setdefault(other, asyncio.Event()).wait(), timeout=5)
        return f"{me} saw {other}"

    script = [tool_turn(("t1", "wait_for", {"me": "a", "other": "b"}), ("t2", "wait_for", {"me": "b", "other": "a"}))]
    script.append(final_turn())
    agent = Agent(model=ScriptedModel(script), tools=[wait_for], store=store)
    result = asyncio.run(agent.arun("t", run_id="r"))
    assert result.status == "completed"
    answers = store.load("r").messages[2]["content"]
    assert [a["content"] for a in answers] == ["a saw b", "b saw a"]


def test_arun_resumes_a_run_that_run_started(store: Store) -> None:
    model = FlakyModel(reading_script(3), fail_on={2})
    with pytest.raises(ModelCallFailed):
        Agent(model=model, tools=[read_ticket], store=store).run("t", run_id="r")
    result = asyncio.run(
        Agent(model=ScriptedModel(reading_script(3)), tools=[read_ticket], store=store).arun(run_id="r")
    )
    assert (result.status, result.turns) == ("completed", 4)


def test_business_state_is_saved_and_tools_can_update_it(store: Store) -> None:
    @tool(effect="read_only")
    def count(*, state: dict[str, Any]) -> str:
        state["seen"] = state.get("seen", 0) + 1
        return str(state["seen"])

    script = [tool_turn(("t1", "count", {})), tool_turn(("t2", "count", {})), final_turn()]
    Agent(model=ScriptedModel(script), tools=[count], store=store).run(
        "t", run_id="r", business_state={"owner": "ops", "seen": 0}
    )
    assert store.load("r").business_state == {"owner": "ops", "seen": 2}


def _counting_run(store: Store, **agent_options: Any) -> Agent:
    @tool(effect="read_only")
    def count(*, state: dict[str, Any]) -> str:
        state["seen"] = state.get("seen", 0) + 1
        return str(state["seen"])

    script = [tool_turn(("t1", "count", {})), tool_turn(("t2", "count", {})), final_turn()]
    return Agent(model=FlakyModel(script, fail_on={2}), tools=[count], store=store, **agent_options)


def test_business_state_is_migrated_on_resume_and_saved_with_its_new_version(store: Store) -> None:
    with pytest.raises(ModelCallFailed):
        _counting_run(store).run("t", run_id="r", business_state={"owner": "ops"})
    assert store.load("r").business_state == {"owner": "ops", "seen": 1}

    def to_v2(old: dict[str, Any]) -> dict[str, Any]:
        return {"owners": [old["owner"]], "seen": old["seen"]}

    agent = _counting_run(store, business_state_version=2, business_state_migrations={1: to_v2})
    agent = agent.replace(model=ScriptedModel(agent.model.responses))  # type: ignore[attr-defined]
    result = agent.run("t", run_id="r")
    assert result.status == "completed"
    stored = store.load("r")
    assert (stored.business_state_version, stored.business_state) == (2, {"owners": ["ops"], "seen": 2})
    assert "business_state_migrated" in [save.label for save in store.history("r")]


def test_a_missing_business_state_migration_is_refused_and_changes_nothing(store: Store) -> None:
    with pytest.raises(ModelCallFailed):
        _counting_run(store).run("t", run_id="r", business_state={"owner": "ops"})
    before = store.read_records("r")
    agent = _counting_run(store, business_state_version=3, business_state_migrations={1: lambda old: old})
    with pytest.raises(IncompatibleSchema, match="from version 2 to 3"):
        agent.run("t", run_id="r")
    assert store.read_records("r") == before


def test_a_business_state_newer_than_the_agent_is_refused(store: Store) -> None:
    with pytest.raises(ModelCallFailed):
        _counting_run(store, business_state_version=2, business_state_migrations={1: lambda old: old}).run(
            "t", run_id="r"
        )
    with pytest.raises(IncompatibleSchema, match="newer than this agent's 1"):
        _counting_run(store).run("t", run_id="r")


@pytest.mark.parametrize("version", [-1, 2**53, 2**70, True, 1.0, "2", None])
def test_a_business_state_version_no_load_accepts_is_refused_when_the_agent_is_built(
    store: Store, version: Any
) -> None:
    with pytest.raises(ConfigError, match="business_state_version must be a whole number from 0 to 2\\*\\*53-1"):
        Agent(ScriptedModel([final_turn()]), [], store, business_state_version=version)
    assert store.list_runs() == []


@pytest.mark.parametrize("version", [0, 1, 2**53 - 1])
def test_every_business_state_version_a_load_accepts_builds_an_agent(store: Store, version: int) -> None:
    assert (
        Agent(ScriptedModel([final_turn()]), [], store, business_state_version=version).business_state_version
        == version
    )


def test_a_second_caller_in_the_same_process_is_refused_while_the_first_holds_the_run(store: Store) -> None:
    # Same Agent, same process (a web server's two requests): the live run is not handed over.
    seen: list[str] = []

    @tool(effect="read_only")
    def look() -> str:
        try:
            agent.run("t", run_id="shared")
        except LeaseHeld:
            seen.append("LeaseHeld")
        return "seen"

    agent = Agent(model=ScriptedModel([tool_turn(("t1", "look", {})), final_turn()]), tools=[look], store=store)
    result = agent.run("t", run_id="shared")
    assert seen == ["LeaseHeld"] and result.status == "completed"


@pytest.mark.parametrize(("grace", "expected"), [(None, 9.0), (2.5, 2.5)])
def test_lease_grace_is_the_takeover_grace_of_the_runs_lease(
    store: Store, grace: float | None, expected: float
) -> None:
    graces: list[float] = []

    @tool
    def act() -> str:
        graces.append(current_lease().grace)
        return "done"

    script = [tool_turn(("t1", "act", {})), final_turn()]
    agent = Agent(model=ScriptedModel(script), tools=[act], store=store, lease_ttl=9.0, lease_grace=grace)
    assert agent.run("t", run_id="graced").status == "completed"
    assert graces == [expected]
