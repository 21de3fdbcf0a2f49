"""A turn that asks for thousands of tool calls runs at most ``max_calls_per_turn`` of them;
the others are saved with the turn and answered with an error, never run and never dropped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from unbroken import Agent, ConfigError, ScriptedModel, open_store, tool

CALLS = 2_000


def flood(count: int) -> list[dict[str, Any]]:
    uses = [{"type": "tool_use", "id": f"t{n}", "name": "fetch", "input": {"n": n}} for n in range(count)]
    return [
        {"content": uses, "stop_reason": "tool_use", "usage": {}},
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
    ]


def test_calls_past_the_cap_are_answered_with_an_error_and_not_run(tmp_path: Path) -> None:
    ran: list[int] = []

    @tool(effect="read_only")
    def fetch(n: int) -> str:
        """Fetch one thing."""
        ran.append(n)
        return f"got {n}"

    started = time.perf_counter()
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        result = Agent(ScriptedModel(flood(CALLS)), tools=[fetch], store=store, max_calls_per_turn=16).run(
            "go", run_id="flood"
        )
        state = store.load("flood")
        first_save = store.history("flood")[1]
    seconds = time.perf_counter() - started
    assert result.status == "completed"
    assert ran == list(range(16))
    results = state.messages[2]["content"]
    assert len(results) == CALLS  # every call answered, in order: the history stays valid
    assert [block["tool_use_id"] for block in results] == [f"t{n}" for n in range(CALLS)]
    assert all(not block.get("is_error") for block in results[:16])
    assert all(block["is_error"] and "max_calls_per_turn" in str(block["content"]) for block in results[16:])
    assert first_save.label == "model_turn"  # save A holds the turn with all its calls
    assert seconds < 10, seconds


def test_the_default_cap_is_128() -> None:
    with open_store("memory://") as store:
        assert Agent(ScriptedModel([]), store=store).max_calls_per_turn == 128


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_a_cap_below_one_is_refused(bad: Any) -> None:
    with open_store("memory://") as store, pytest.raises(ConfigError, match="max_calls_per_turn"):
        Agent(ScriptedModel([]), store=store, max_calls_per_turn=bad)
