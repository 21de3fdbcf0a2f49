"""Reconcile on resume: what happens to each tool call left without a result, per tool class
and per unknown-outcome policy (issue 3). A crash is simulated in-process by raising a
BaseException at a named crash point (the SIGKILL proofs live in tests/crash)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from core_scripts import final_turn, tool_turn

from unbroken import (
    Agent,
    Found,
    NotExecuted,
    ScriptedModel,
    Store,
    Tool,
    ToolCall,
    ToolResult,
    Unknown,
    crashpoints,
    resolve_call,
    tool,
)
from unbroken.ledger import EffectLedger
from unbroken.reconcile import decide
from unbroken.runner import UnknownPolicy
from unbroken.state import idempotency_key, occurrence_key

RUN = "reconcile-run"
TASK = "email the customer their refund"


class SimulatedCrash(BaseException):
    """Stands in for SIGKILL: nothing after the crash point runs, nothing catches it."""


@contextmanager
def crash_at(label: str, n: int = 1) -> Iterator[None]:
    seen = 0

    def observer(hit: str) -> None:
        nonlocal seen
        if hit == label:
            seen += 1
            if seen == n:
                raise SimulatedCrash(label)

    crashpoints.observe(observer)
    try:
        with pytest.raises(SimulatedCrash):
            yield
    finally:
        crashpoints.observe(None)


class World:
    """The outside world the tools act on: what ran, with which key."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def count(self, what: str) -> int:
        return sum(1 for kind, _ in self.log if kind == what)

    def tools(self, probe: Callable[[ToolCall], Any] | None = None) -> list[Tool]:
        @tool(effect="read_only")
        def read_file(path: str) -> str:
            """Read a file."""
            self.log.append(("read", path))
            return f"contents of {path}"

        @tool(effect="idempotent")
        def put_object(name: str, *, call: ToolCall) -> str:
            """Store an object."""
            self.log.append(("put", call.idempotency_key))
            return f"stored {name}"

        @tool(probe=probe)
        def send_email(to: str, *, call: ToolCall) -> str:
            """Send an email (no effect declared: side_effect)."""
            self.log.append(("send", (to, call.idempotency_key)))
            return f"sent to {to}"

        return [read_file, put_object, send_email]


def one_call(name: str, arguments: dict[str, Any], call_id: str = "toolu_1") -> list[dict[str, Any]]:
    return [tool_turn((call_id, name, arguments)), final_turn()]


EMAIL = one_call("send_email", {"to": "customer@example.com"})


def agent(store: Store, world: World, script: list[dict[str, Any]], **options: Any) -> Agent:
    probe = options.pop("probe", None)
    return Agent(model=ScriptedModel(script), tools=world.tools(probe), store=store, **options)


def answers(store: Store) -> dict[str, dict[str, Any]]:
    """The tool_result blocks of the run's history by tool_use id; asserts the history is valid."""
    messages = store.load(RUN).messages
    assert ScriptedModel([]).dangling_call_ids(messages) == []
    blocks = [b for m in messages if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]]
    found: dict[str, dict[str, Any]] = {}
    for block in blocks:
        assert block["tool_use_id"] not in found, "one tool_result per tool_use"
        found[block["tool_use_id"]] = block
    return found


def ledger_status(store: Store, call_id: str = "toolu_1") -> tuple[str, int]:
    (entry,) = [entry for entry in store.ledger_list(RUN) if entry.call_id == call_id]
    return entry.status, entry.attempts


def first_turn_key(call_id: str = "toolu_1", position: int = 0) -> str:
    """The key of a call of the run's first turn: its save A is save point 2."""
    return occurrence_key(RUN, 2, position, call_id)


# ---------------------------------------------------------------------- idempotency keys


def test_the_key_is_saved_with_the_pending_call_at_save_point_a(store: Store) -> None:
    world = World()
    with crash_at("save.model_turn.after"):
        agent(store, world, EMAIL).run(TASK, run_id=RUN)
    (pending,) = store.load(RUN).pending_calls
    assert pending.idempotency_key == first_turn_key()
    assert world.log == []


def test_the_tool_gets_the_saved_key_and_arguments_on_resume_even_if_the_model_would_now_differ(
    store: Store,
) -> None:
    world = World()
    with crash_at("save.model_turn.after"):
        agent(store, world, EMAIL).run(TASK, run_id=RUN)
    rephrased = one_call("send_email", {"to": "Customer <customer@example.com>"})
    result = agent(store, world, rephrased).run(TASK, run_id=RUN)
    assert result.status == "completed"
    assert world.log == [("send", ("customer@example.com", first_turn_key()))]


# ---------------------------------------------------------------------- per tool class


def test_a_read_only_call_interrupted_after_running_is_run_again(store: Store) -> None:
    world = World()
    script = one_call("read_file", {"path": "orders.csv"})
    with crash_at("tool.after_execute"):
        agent(store, world, script).run(TASK, run_id=RUN)
    result = agent(store, world, script).run(TASK, run_id=RUN)
    assert world.count("read") == 2
    assert result.reconciled == [("toolu_1", "read_file", "re-run")]
    assert answers(store)["toolu_1"]["content"] == "contents of orders.csv"
    assert store.ledger_list(RUN) == []


def test_an_idempotent_call_interrupted_after_running_is_run_again_with_the_same_key(store: Store) -> None:
    world = World()
    script = one_call("put_object", {"name": "report.txt"})
    with crash_at("tool.after_execute"):
        agent(store, world, script).run(TASK, run_id=RUN)
    agent(store, world, script).run(TASK, run_id=RUN)
    assert world.log == [("put", first_turn_key())] * 2
    assert ledger_status(store) == ("succeeded", 2)
    assert answers(store)["toolu_1"]["content"] == "stored report.txt"


@pytest.mark.parametrize("is_error", [False, True], ids=["succeeded", "failed"])
def test_a_side_effect_settled_in_the_ledger_reuses_its_recorded_result(store: Store, is_error: bool) -> None:
    world = World()
    with crash_at("tool.after_execute"):
        agent(store, world, EMAIL).run(TASK, run_id=RUN)
    # The outcome reached the ledger but not the run's record (a store that writes them apart).
    pending = store.ledger_get(RUN, first_turn_key())
    assert pending is not None
    store.ledger_put(EffectLedger.outcome(pending, ToolResult("toolu_1", "sent (recorded)", is_error)))
    result = agent(store, world, EMAIL).run(TASK, run_id=RUN)
    assert world.count("send") == 1
    assert result.reconciled == [("toolu_1", "send_email", "reused")]
    answer = answers(store)["toolu_1"]
    assert (answer["content"], answer.get("is_error", False)) == ("sent (recorded)", is_error)


def test_a_pending_side_effect_the_probe_finds_gets_the_probed_result_and_is_not_rerun(store: Store) -> None:
    world = World()
    probe = lambda call: Found({"message_id": 7})  # noqa: E731
    with crash_at("tool.after_execute"):
        agent(store, world, EMAIL, probe=probe).run(TASK, run_id=RUN)
    result = agent(store, world, EMAIL, probe=probe).run(TASK, run_id=RUN)
    assert world.count("send") == 1
    assert result.reconciled == [("toolu_1", "send_email", "probed")]
    assert answers(store)["toolu_1"]["content"] == '{"message_id": 7}'
    assert ledger_status(store) == ("succeeded", 1)


def test_a_pending_side_effect_the_probe_says_never_ran_is_run_once_now(store: Store) -> None:
    world = World()
    with crash_at("tool.before_execute"):
        agent(store, world, EMAIL, probe=lambda call: NotExecuted()).run(TASK, run_id=RUN)
    agent(store, world, EMAIL, probe=lambda call: NotExecuted()).run(TASK, run_id=RUN)
    assert world.count("send") == 1
    assert ledger_status(store) == ("succeeded", 2)
    assert answers(store)["toolu_1"]["content"] == "sent to customer@example.com"


@pytest.mark.parametrize(
    ("probe", "reason"),
    [
        (None, "the tool has no probe"),
        (lambda call: Unknown("outbox unreachable"), "outbox unreachable"),
        (lambda call: 1 / 0, "the probe raised ZeroDivisionError"),
    ],
    ids=["no probe", "probe says unknown", "probe raises"],
)
def test_a_pending_side_effect_that_cannot_be_settled_is_told_to_the_model_as_unknown(
    store: Store, probe: Callable[[ToolCall], Any] | None, reason: str
) -> None:
    world = World()
    with crash_at("tool.after_execute"):
        agent(store, world, EMAIL, probe=probe).run(TASK, run_id=RUN)
    result = agent(store, world, EMAIL, probe=probe).run(TASK, run_id=RUN)
    assert (result.status, world.count("send")) == ("completed", 1)
    answer = answers(store)["toolu_1"]
    assert answer["is_error"] is True
    assert answer["content"].startswith("UNKNOWN OUTCOME") and reason in answer["content"]
    assert ledger_status(store)[0] == "unknown"


def test_a_malformed_call_is_answered_and_never_reaches_the_ledger(store: Store) -> None:
    call = ToolCall("toolu_1", "send_email", {}, idempotency_key(RUN, "toolu_1"), error="input is a str")
    decision = decide(call, World().tools()[2], EffectLedger(store, RUN))
    assert decision.action == "answer" and decision.result is not None
    assert (decision.result.is_error, decision.result.how) == (True, "invalid")
    assert store.ledger_list(RUN) == []


# ---------------------------------------------------------------------- policies


def crash_then_resume(store: Store, world: World, policy: UnknownPolicy, script: list[dict[str, Any]] = EMAIL) -> Any:
    with crash_at("tool.after_execute"):
        agent(store, world, script, unknown_policy=policy).run(TASK, run_id=RUN)
    return agent(store, world, script, unknown_policy=policy).run(TASK, run_id=RUN)


def test_the_pause_policy_stops_the_run_until_a_person_settles_the_call(store: Store) -> None:
    world = World()
    result = crash_then_resume(store, world, "pause")
    assert result.status == "paused"
    assert ledger_status(store)[0] == "unknown"
    again = agent(store, world, [], unknown_policy="pause").run(run_id=RUN)  # an empty script: no model call
    assert again.status == "paused"
    assert world.count("send") == 1


def test_resolving_a_paused_call_with_its_result_continues_without_rerunning_it(store: Store) -> None:
    world = World()
    crash_then_resume(store, world, "pause")
    resolve_call(store, RUN, "toolu_1", result="the customer confirmed receipt")
    result = agent(store, world, EMAIL, unknown_policy="pause").run(run_id=RUN)
    assert (result.status, world.count("send")) == ("completed", 1)
    assert answers(store)["toolu_1"]["content"] == "the customer confirmed receipt"
    assert ledger_status(store)[0] == "succeeded"


def test_resolving_a_paused_call_as_not_executed_runs_it_once_on_resume(store: Store) -> None:
    world = World()
    with crash_at("tool.before_execute"):
        agent(store, world, EMAIL, unknown_policy="pause").run(TASK, run_id=RUN)
    assert agent(store, world, EMAIL, unknown_policy="pause").run(run_id=RUN).status == "paused"
    resolve_call(store, RUN, "toolu_1", not_executed=True)
    result = agent(store, world, EMAIL, unknown_policy="pause").run(run_id=RUN)
    assert (result.status, world.count("send")) == ("completed", 1)
    assert answers(store)["toolu_1"]["content"] == "sent to customer@example.com"
    assert ledger_status(store) == ("succeeded", 2)


def test_the_fail_policy_fails_the_run_and_still_answers_every_tool_use(store: Store) -> None:
    world = World()
    script = [
        tool_turn(("toolu_1", "send_email", {"to": "customer@example.com"}), ("toolu_2", "read_file", {"path": "x"})),
        final_turn(),
    ]
    result = crash_then_resume(store, world, "fail", script)
    assert result.status == "failed"
    state = store.load(RUN)
    assert state.error is not None and "unknown outcome" in state.error
    found = answers(store)
    assert found["toolu_1"]["content"].startswith("UNKNOWN OUTCOME")
    # Both drivers settle unknown outcomes last: the read ran before the policy failed the run.
    assert found["toolu_2"] == {"type": "tool_result", "tool_use_id": "toolu_2", "content": "contents of x"}
    assert (world.count("send"), world.count("read")) == (1, 1)
    assert ledger_status(store)[0] == "unknown"


@pytest.mark.parametrize("runner", ["run", "arun"])
def test_a_pause_leaves_no_call_it_claimed_unexecuted(store: Store, runner: str) -> None:
    world = World()
    script = [
        tool_turn(("toolu_put", "put_object", {"name": "a"}), ("toolu_mail", "send_email", {"to": "c@example.com"})),
        final_turn(),
    ]
    with crash_at("save.model_turn.after"):
        agent(store, world, script).run(TASK, run_id=RUN)
    # What a dead async run leaves: both intents saved, neither outcome.
    for call in store.load(RUN).pending_calls:
        entry = EffectLedger(store, RUN).claim(call).entry
        assert entry.status == "pending"
    paused = agent(store, world, script, unknown_policy="pause")
    result = paused.run(run_id=RUN) if runner == "run" else asyncio.run(paused.arun(run_id=RUN))
    assert result.status == "paused"
    assert ledger_status(store, "toolu_put") == ("succeeded", 2)
    assert world.count("put") == 1
    assert "toolu_put" in [result.call_id for result in store.load(RUN).results.values()]


def test_tell_model_is_the_default_policy(store: Store) -> None:
    world = World()
    with crash_at("tool.after_execute"):
        agent(store, world, EMAIL).run(TASK, run_id=RUN)
    result = agent(store, world, EMAIL).run(TASK, run_id=RUN)
    assert result.status == "completed"
    assert replace(result, state=None).reconciled == [("toolu_1", "send_email", "unknown")]
