"""One account of each call, and mistakes that are not crashes (issue 21 items 6 and 7).

The engine records, in the save that settles a call, what it found, what the probe said, the
policy it applied and the attempt; ``unbroken history`` (``ops.settlements``) renders that and
nothing else. A call whose arguments no longer fit its tool is decided before it runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from core_scripts import final_turn, tool_turn

from unbroken import (
    Agent,
    NotExecuted,
    ScriptedModel,
    Store,
    ToolCall,
    crashpoints,
    open_store,
    ops,
    resolve_call,
    tool,
)
from unbroken.runner import UnknownPolicy
from unbroken.state import Effect

RUN = "account-run"


class SimulatedCrash(BaseException):
    """Stands in for SIGKILL: nothing after the crash point runs, nothing catches it."""


@pytest.fixture
def store() -> Iterator[Store]:
    """One store: the account is in the record, the same bytes on every store (the crash test
    reads it back from SQLite segments)."""
    opened = open_store("memory://")
    yield opened
    opened.close()


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


def notes(store: Store) -> list[str]:
    return [line for lines in ops.settlements(store, RUN).values() for line in lines]


def answers(store: Store) -> list[dict[str, Any]]:
    messages = store.load(RUN).messages
    return [b for m in messages if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]]


SCRIPT = [tool_turn(("t1", "send", {"to": "a"})), final_turn()]
STARTED = "it was started before and its outcome never recorded"


def crashed_then_resumed(store: Store, crash_at: Any, point: str, agent: Agent, again: Agent | None = None) -> Any:
    crash_at(point)
    with pytest.raises(SimulatedCrash):
        agent.run("t", run_id=RUN)
    return (again or agent).run(run_id=RUN)


def sender(sent: list[str], *, probe: Any = None, effect: Effect = "side_effect") -> Any:
    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    return tool(effect=effect, probe=probe)(send)


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("tell_model", "outcome UNKNOWN; the model was told"),
        ("pause", "outcome UNKNOWN; the run paused for `unbroken resolve`"),
        ("fail", "outcome UNKNOWN; the run failed by policy"),
    ],
)
def test_an_effect_that_ran_without_a_probe_reads_as_unknown_with_the_policy_applied(
    store: Store, crash_at: Any, policy: UnknownPolicy, said: str
) -> None:
    sent: list[str] = []
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[sender(sent)], store=store, unknown_policy=policy)
    crashed_then_resumed(store, crash_at, "tool.after_execute", agent)
    assert sent == ["a"]
    assert notes(store) == [
        "resumed after save 2: the previous process ended while settling tool calls: 1 of 1 call(s) had no result",
        f"call t1 (send): {STARTED}; no probe; {said}",
    ]


def test_a_call_run_again_because_its_probe_said_it_did_not_happen_names_the_probe(store: Store, crash_at: Any) -> None:
    sent: list[str] = []
    send = sender(sent, probe=lambda call: NotExecuted())
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[send], store=store)
    assert crashed_then_resumed(store, crash_at, "tool.before_execute", agent).status == "completed"
    assert sent == ["a"]
    assert notes(store)[1] == f"call t1 (send): {STARTED}; the probe said it did not happen; run again (attempt 2)"


def test_a_read_only_call_run_again_and_a_call_never_started_say_so(store: Store, crash_at: Any) -> None:
    read: list[str] = []

    @tool(effect="read_only")
    def look(name: str) -> str:
        read.append(name)
        return name

    @tool(effect="side_effect")
    def send(to: str) -> str:
        return to

    script = [tool_turn(("t1", "look", {"name": "x"}), ("t2", "send", {"to": "a"})), final_turn()]
    agent = Agent(model=ScriptedModel(script), tools=[look, send], store=store)
    crashed_then_resumed(store, crash_at, "tool.after_execute", agent)
    assert read == ["x", "x"]
    assert notes(store)[1:] == [
        "call t1 (look): run again (attempt 2)",
        "call t2 (send): it had not started: run now (attempt 1)",
    ]


def test_a_resume_after_a_kill_during_a_model_call_is_recorded(store: Store, crash_at: Any) -> None:
    agent = Agent(model=ScriptedModel([final_turn()]), store=store)
    crashed_then_resumed(store, crash_at, "model.before_call", agent)
    assert notes(store) == [
        "resumed after save 1: the previous process ended during a model call (or a compaction): no tool call "
        "was in flight"
    ]
    assert store.load(RUN).resumes == 1


def test_a_settlement_by_hand_is_recorded_with_the_resolve(store: Store, crash_at: Any) -> None:
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[sender([])], store=store, unknown_policy="pause")
    assert crashed_then_resumed(store, crash_at, "tool.after_execute", agent).status == "paused"
    resolve_call(store, RUN, "t1", result="sent (checked in the mail log)")
    assert agent.run(run_id=RUN).status == "completed"
    assert notes(store) == [
        "resumed after save 2: the previous process ended while settling tool calls: 1 of 1 call(s) had no result",
        f"call t1 (send): {STARTED}; no probe; outcome UNKNOWN; the run paused for `unbroken resolve`",
        "call t1 (send): its outcome had been reported unknown before; settled by hand: a person said it took "
        "effect (unbroken resolve)",
        "resumed after save 5: 1 call(s) of the turn had been settled by hand (unbroken resolve); 0 of 1 call(s) "
        "had no result",
    ]


# ---------------------------------------------------------------------- mistakes are not crashes


def test_a_side_effect_whose_signature_changed_since_the_crash_pauses_and_can_be_resolved(
    store: Store, crash_at: Any
) -> None:
    sent: list[str] = []
    before = sender(sent, probe=lambda call: NotExecuted())
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[before], store=store, unknown_policy="pause")

    @tool(effect="side_effect", probe=lambda call: NotExecuted())
    def send(to: str, cc: str) -> str:  # a required argument added between the crash and the resume
        sent.append(to)
        return to

    changed = agent.replace(tools=[send])
    assert crashed_then_resumed(store, crash_at, "tool.before_execute", agent, changed).status == "paused"
    assert sent == []  # decided before running: never started with arguments that do not fit
    state = store.load(RUN)
    assert state.phase == "paused" and "unknown outcome" in (state.error or "")
    (line,) = [line for line in notes(store) if line.startswith("call t1")]
    assert "do not fit the signature of tool 'send' as defined now" in line and "run paused" in line
    (entry,) = store.ledger_list(RUN)
    assert entry.status == "unknown"  # never silently "failed"
    resolve_call(store, RUN, "t1", not_executed=True)
    assert changed.run(run_id=RUN).status == "completed" and sent == []
    (answer,) = answers(store)
    assert answer["is_error"] and "did not take effect (checked by a person)" in answer["content"]


@pytest.mark.parametrize("effect", ["read_only", "idempotent"])
def test_a_read_only_or_idempotent_call_whose_signature_changed_gets_an_error_saying_so(
    store: Store, crash_at: Any, effect: Effect
) -> None:
    ran: list[str] = []

    def look(name: str, *, call: ToolCall) -> str:
        ran.append(name)
        return name

    def look_changed(name: str, depth: int, *, call: ToolCall) -> str:
        ran.append(name)
        return name

    look_changed.__name__ = "look"
    script = [tool_turn(("t1", "look", {"name": "x"})), final_turn()]
    agent = Agent(model=ScriptedModel(script), tools=[tool(effect=effect)(look)], store=store)
    changed = agent.replace(tools=[tool(effect=effect)(look_changed)])
    assert crashed_then_resumed(store, crash_at, "tool.after_execute", agent, changed).status == "completed"
    assert ran == ["x"]  # the first run only
    (answer,) = answers(store)
    assert answer["is_error"] and "do not fit the signature of tool 'look' as defined now" in answer["content"]
    assert "TypeError" not in answer["content"].split("(")[0]
    (line,) = [line for line in notes(store) if line.startswith("call t1")]
    assert "not run: its arguments do not fit the signature" in line
    if effect == "idempotent":
        (entry,) = store.ledger_list(RUN)
        assert (entry.status, entry.attempts) == ("failed", 1)  # settled with the error; no new attempt claimed
