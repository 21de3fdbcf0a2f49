"""Conversations (issue 11 item 2): ``Agent.send`` continues a run with a follow-up message.
The last tests kill a real child process while a follow-up is being accepted."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from features_child import FOLLOW_UP, SCRIPT, make_agent
from features_crash import child, sent
from features_scripts import TOKENS_PER_TURN, final_turn, tool_results, tool_turn

from unbroken import Agent, ConfigError, LeaseHeld, RunResult, ScriptedModel, Store, open_store, ops, tool
from unbroken.errors import RunInterrupted, RunNotFound, StoreDataLost
from unbroken.leases import acquire


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    opened = open_store(url)
    yield opened
    opened.close()


def user_texts(result: RunResult) -> list[str]:
    assert result.state is not None
    return [m["content"] for m in result.state.messages if m["role"] == "user" and isinstance(m["content"], str)]


def looking_agent(store: Store, script: list[dict[str, Any]], **options: Any) -> tuple[Agent, list[str]]:
    seen: list[str] = []

    @tool(effect="read_only")
    def look(x: str) -> str:
        """Look at something."""
        seen.append(x)
        return f"saw {x}"

    return Agent(ScriptedModel(script), [look], store, **options), seen


def send(agent: Agent, driver: str, run_id: str, message: str, **options: Any) -> RunResult:
    if driver == "async":
        return asyncio.run(agent.asend(run_id, message, **options))
    return agent.send(run_id, message, **options)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_follow_up_continues_the_run_with_one_history_and_counters_that_carry_on(store: Store, driver: str) -> None:
    script = [tool_turn(("c1", "look", {"x": "inbox"})), final_turn("3 mails"), final_turn("the first is from Ann")]
    agent, _ = looking_agent(store, script)
    first = send(agent, driver, "chat", "How many mails?", create=True)
    second = send(agent, driver, "chat", "Who sent the first?")
    assert (first.status, first.turns, first.output) == ("completed", 2, "3 mails")
    assert (second.status, second.turns, second.output) == ("completed", 3, "the first is from Ann")
    assert second.tokens_used == 3 * TOKENS_PER_TURN
    assert user_texts(second) == ["How many mails?", "Who sent the first?"]
    assert store.load("chat").task == "How many mails?"


def test_max_turns_counts_per_request_unless_asked_per_run(store: Store) -> None:
    script = [tool_turn((f"c{i}", "look", {"x": str(i)})) for i in range(10)]
    agent, _ = looking_agent(store, script, max_turns=2)
    assert agent.send("chat", "go", create=True).turns == 2
    assert agent.send("chat", "go on").turns == 4  # two more for this request
    assert agent.send("chat", "and on", max_turns=1).turns == 5
    result = agent.send("chat", "until 7 in all", max_turns=7, turns_per="run")
    assert (result.status, result.turns) == ("max_turns", 7)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_message_sent_to_an_interrupted_turn_is_delivered_after_its_calls_are_settled(
    store: Store, driver: str
) -> None:
    stop = threading.Event()
    script = [
        tool_turn(("c1", "look", {"x": "slow"}), ("c2", "look", {"x": "other"})),
        final_turn("done, hurrying"),
    ]
    agent, seen = looking_agent(store, script)
    original_look = agent.tools["look"]

    @tool(effect="read_only", name="look")
    def look(x: str) -> str:
        """Look at something."""
        stop.set()  # the user interrupts while the first call runs
        return str(original_look(x))

    agent = agent.replace(tools=[look])
    with pytest.raises(RunInterrupted):
        send(agent, driver, "chat", "look at both", stop=stop, create=True)
    assert store.load("chat").phase == "running_tools"
    result = send(agent, driver, "chat", "please hurry")
    assert result.status == "completed"
    assert result.state is not None
    roles = [(m["role"], m["content"] if isinstance(m["content"], str) else "blocks") for m in result.state.messages]
    assert roles == [
        ("user", "look at both"),
        ("assistant", "blocks"),
        ("user", "blocks"),  # both results first: the provider needs them right after the calls
        ("user", "please hurry"),
        ("assistant", "blocks"),
    ]
    assert [block["tool_use_id"] for block in tool_results(result.state.messages)] == ["c1", "c2"]
    assert set(seen) == {"slow", "other"}  # (under arun "other" may run twice: it is read-only, re-run freely)


def test_a_message_sent_to_a_run_awaiting_approval_waits_for_the_decision(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", str(tmp_path / "outbox.jsonl")
    agent = make_agent(url, outbox, [SCRIPT[0], final_turn("ok, and c")])
    assert agent.run("Email a and b", run_id="r1").status == "awaiting_approval"
    assert agent.send("r1", "and then write to c").status == "awaiting_approval"
    with open_store(url) as store:
        ops.approve(store, "r1", "toolu_a")
        ops.deny(store, "r1", "toolu_b", reason="not b")
    result = agent.run(run_id="r1")
    assert result.status == "completed" and result.output == "ok, and c"
    assert user_texts(result) == ["Email a and b", "and then write to c"]
    assert sent(Path(outbox)) == ["a@example.com"]


def test_a_retried_send_with_the_same_message_id_adds_nothing(store: Store) -> None:
    agent, _ = looking_agent(store, [final_turn("hi"), final_turn("fine"), final_turn("unused")])
    agent.send("chat", "hello", message_id="m1", create=True)
    agent.send("chat", "hello", message_id="m1", create=True)  # the start, retried
    agent.send("chat", "how are you?", message_id="m2")
    result = agent.send("chat", "how are you?", message_id="m2")
    assert user_texts(result) == ["hello", "how are you?"]
    assert result.turns == 2


def test_a_send_to_a_run_live_elsewhere_is_refused_and_records_nothing(store: Store) -> None:
    agent, _ = looking_agent(store, [final_turn("hi"), final_turn("unused")])
    agent.send("chat", "hello", create=True)
    saves = len(store.history("chat"))
    lease = acquire(store, "chat", "someone-else:1:2:3", 60.0)
    with pytest.raises(LeaseHeld):
        agent.send("chat", "are you there?")
    store.release_lease(lease)
    assert len(store.history("chat")) == saves


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_send_to_a_conversation_that_does_not_exist_is_run_not_found_and_starts_nothing(
    store: Store, driver: str
) -> None:
    agent, seen = looking_agent(store, [tool_turn(("c1", "look", {"x": "inbox"})), final_turn("done")])
    with pytest.raises(RunNotFound, match="send\\(run_id, message, create=True\\)") as missing:
        send(agent, driver, "chat", "How many mails?")
    assert "the store lost it" in str(missing.value)
    assert not store.exists("chat") and seen == []


def test_a_send_to_a_conversation_the_store_lost_is_refused_even_with_create(store: Store) -> None:
    """Its save records gone, its ledger kept (a partial loss): ``create=True`` does not start it
    over either, since the calls it made would run again."""
    charged: list[str] = []

    @tool(effect="side_effect")
    def charge(x: str) -> str:
        """Charge a card."""
        charged.append(x)
        return "charged"

    agent = Agent(ScriptedModel([tool_turn(("c1", "charge", {"x": "card"})), final_turn("done")]), [charge], store)
    agent.send("chat", "Charge the card", create=True)
    entries = store.ledger_list("chat")
    store.delete_run("chat")
    for entry in entries:  # the store kept the ledger and lost the saves
        store.ledger_put(entry)

    with pytest.raises(StoreDataLost, match="effect ledger holds 1 entry"):
        agent.send("chat", "Charge the card", create=True)
    with pytest.raises(StoreDataLost):
        agent.run("Charge the card", run_id="chat")
    assert charged == ["card"] and not store.exists("chat")


@pytest.mark.parametrize(
    ("options", "what"),
    [({"message": " "}, "non-empty"), ({"max_turns": 0}, "max_turns"), ({"turns_per": "day"}, "turns_per")],
)
def test_a_bad_follow_up_is_refused_before_anything_is_written(
    store: Store, options: dict[str, Any], what: str
) -> None:
    agent, _ = looking_agent(store, [final_turn("hi")])
    agent.send("chat", "hello", create=True)
    saves = len(store.history("chat"))
    arguments: dict[str, Any] = {"message": "more", **options}
    with pytest.raises(ConfigError, match=what):
        agent.send("chat", arguments.pop("message"), **arguments)
    assert len(store.history("chat")) == saves


# --------------------------------------------------------------------------- crashes


@pytest.mark.parametrize(
    "point",
    [
        "save.user_message.before:1",
        "save.user_message.after:1",
        pytest.param("model.before_call:1", marks=pytest.mark.slow),
        pytest.param("tool.after_execute:1", marks=pytest.mark.slow),
    ],
)
def test_a_crash_while_a_follow_up_is_accepted_loses_nothing_and_adds_it_once(tmp_path: Path, point: str) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", str(tmp_path / "outbox.jsonl")
    first = make_agent(url, outbox, SCRIPT + FOLLOW_UP, approval=False).run("Email a and b", run_id="r1")
    assert first.status == "completed"
    args = [
        "continue",
        "--store",
        url,
        "--run-id",
        "r1",
        "--outbox",
        outbox,
        "--message",
        "c too",
        "--message-id",
        "m1",
    ]
    child(*args, crash_at=point)
    assert child(*args) == {"status": "completed", "turns": 4}
    assert sent(Path(outbox)) == ["a@example.com", "b@example.com", "c@example.com"]
    with open_store(url) as store:
        state = store.load("r1")
    assert [m["content"] for m in state.messages if isinstance(m["content"], str)] == ["Email a and b", "c too"]
