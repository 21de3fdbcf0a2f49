"""Compaction: the full history is kept, the model is sent a summary and a recent window, and
no cut ever separates a tool call from its result (checked on the real requests)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from provider_agents import SYSTEM, TASK, build_model, step
from provider_child import COMPACT_AT, KEEP_RECENT
from provider_server import STEPS, SUMMARY_MARKER, ProviderServer, stepping

from unbroken import Agent, ConfigError, ModelCallFailed, RunState, ToolCall, ToolResult, open_store
from unbroken.compaction import Compactor
from unbroken.providers import anthropic_format, openai_format

CHILD = str(Path(__file__).with_name("provider_child.py"))


def run_steps(server: ProviderServer, url: str = "memory://", **compactor: Any) -> tuple[Agent, Any]:
    server.responder = stepping
    compaction = Compactor(threshold_tokens=COMPACT_AT, keep_recent_tokens=KEEP_RECENT, **compactor)
    agent = Agent(model=build_model("anthropic", server.url), tools=[step], store=open_store(url), system=SYSTEM,
                  compaction=compaction)  # fmt: skip
    return agent, agent.run(TASK, run_id="long")


def model_requests(server: ProviderServer) -> list[dict[str, Any]]:
    return [body for body in server.sent() if SUMMARY_MARKER not in str(body.get("system"))]


def orphan_results(messages: Sequence[Any]) -> list[str]:
    seen_calls: set[str] = set()
    orphans = []
    for message in messages:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block["type"] == "tool_use":
                seen_calls.add(block["id"])
            if block["type"] == "tool_result" and block["tool_use_id"] not in seen_calls:
                orphans.append(block["tool_use_id"])
    return orphans


def test_a_long_run_is_compacted_and_every_request_keeps_its_tool_pairs_whole(server: ProviderServer) -> None:
    agent, result = run_steps(server)
    assert result.status == "completed" and result.output == f"All {STEPS} steps done."
    requests = model_requests(server)
    compacted = [body for body in requests if "<summary_of_earlier_work>" in str(body["messages"][0]["content"])]
    assert compacted, "the run never compacted"
    for body in requests:
        assert anthropic_format.dangling_call_ids(body["messages"]) == []
        assert orphan_results(body["messages"]) == []
        assert [m["role"] for m in body["messages"]] == ["user", "assistant"] * (len(body["messages"]) // 2) + ["user"]
    full_history = len(agent.store.load("long").messages)
    assert len(requests[-1]["messages"]) < full_history - 1


def test_the_full_history_is_kept_and_the_compaction_is_a_save_point(server: ProviderServer) -> None:
    agent, _result = run_steps(server)
    state = agent.store.load("long")
    assert len(state.messages) == 1 + 2 * STEPS + 1
    assert [call["id"] for m in state.messages[1::2] for call in m["content"] if call["type"] == "tool_use"] == [
        f"toolu_step_{n}" for n in range(1, STEPS + 1)
    ]
    labels = [save.label for save in agent.store.history("long")]
    assert "compacted" in labels
    assert state.summary is not None and state.summary.startswith("Finished steps: [1, 2, 3")
    assert 0 < state.summary_upto < len(state.messages)


def test_arun_with_an_async_client_compacts_the_same_way(server: ProviderServer) -> None:
    server.responder = stepping
    agent = Agent(
        model=build_model("anthropic", server.url, use_async=True),
        tools=[step],
        store=open_store("memory://"),
        system=SYSTEM,
        compaction=Compactor(threshold_tokens=COMPACT_AT, keep_recent_tokens=KEEP_RECENT),
    )
    result = asyncio.run(agent.arun(TASK, run_id="long"))
    assert result.status == "completed"
    assert "compacted" in [save.label for save in agent.store.history("long")]
    assert all(anthropic_format.dangling_call_ids(body["messages"]) == [] for body in model_requests(server))


def test_a_failed_summary_call_fails_the_model_call_and_the_run_resumes(server: ProviderServer) -> None:
    failed_once: list[bool] = []

    def flaky(path: str, body: dict[str, Any]) -> Any:
        if SUMMARY_MARKER in str(body.get("system")) and not failed_once:
            failed_once.append(True)
            return 500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}, {}
        return stepping(path, body)

    compaction = Compactor(threshold_tokens=COMPACT_AT, keep_recent_tokens=KEEP_RECENT)
    agent = Agent(model=build_model("anthropic", server.url), tools=[step], store=open_store("memory://"),
                  system=SYSTEM, compaction=compaction)  # fmt: skip
    server.responder = flaky
    with pytest.raises(ModelCallFailed, match="summary call"):
        agent.run(TASK, run_id="long")
    assert agent.store.load("long").summary is None
    result = agent.run(None, run_id="long")
    assert result.status == "completed" and agent.store.load("long").summary is not None


def test_the_summary_call_is_counted_in_tokens_used(server: ProviderServer) -> None:
    _, result = run_steps(server)
    calls = len(server.requests)
    assert calls > STEPS + 1
    assert result.tokens_used == 15 * calls


def test_a_pluggable_summariser_folds_old_turns_into_the_previous_summary(server: ProviderServer) -> None:
    seen: list[tuple[str | None, list[Any]]] = []

    def summarise(previous: str | None, messages: Sequence[Any]) -> str:
        seen.append((previous, list(messages)))
        return f"summary {len(seen)}"

    _agent, result = run_steps(server, summarise=summarise)
    assert result.status == "completed" and len(seen) >= 2
    assert seen[0][0] is None and seen[1][0] == "summary 1"
    assert seen[0][1][0] == {"role": "user", "content": TASK}
    assert all(folded[0]["role"] == "assistant" for _, folded in seen[1:])
    assert all(folded[-1]["content"][0]["type"] == "tool_result" for _, folded in seen)
    assert all(SUMMARY_MARKER not in str(body.get("system")) for body in server.sent())
    last = server.sent()[-1]["messages"][0]["content"]
    assert f"summary {len(seen)}" in last and TASK in last


def test_a_run_killed_during_compaction_resumes_and_sends_the_same_requests(
    tmp_path: Path, server: ProviderServer
) -> None:
    run_steps(server, f"sqlite:///{tmp_path / 'clean.db'}")
    clean = server.bodies()
    server.requests.clear()

    url = f"sqlite:///{tmp_path / 'killed.db'}"
    env = {k: v for k, v in os.environ.items() if k != "UNBROKEN_CRASH_AT"}
    args = [sys.executable, CHILD, "anthropic", server.url, url, "long", "sync", "compact"]
    killed = subprocess.run(args, env={**env, "UNBROKEN_CRASH_AT": "save.compacted.before:1"}, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    finished = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stderr

    bodies = server.bodies()
    assert len(bodies) == len(clean) + 1  # the summary request whose answer died with the process
    assert [b for i, b in enumerate(bodies) if i == 0 or bodies[i - 1] != b] == clean
    assert (
        open_store(url).load("long").messages == open_store(f"sqlite:///{tmp_path / 'clean.db'}").load("long").messages
    )


# --------------------------------------------------------------------------- where it cuts


# Only the history rules of each provider (what ``Compactor.cut`` uses), without a client.
RULES = {
    "anthropic": anthropic_format.HISTORY,
    "openai-chat": openai_format.CHAT_HISTORY,
    "openai-responses": openai_format.RESPONSES_HISTORY,
}


def _turn(provider: str, turn: int, calls: int) -> list[Any]:
    ids = [f"c{turn}_{i}" for i in range(calls)]
    if provider == "anthropic":
        blocks: list[dict[str, Any]] = [{"type": "thinking", "thinking": "t" * 40, "signature": "s"}]
        blocks += [{"type": "tool_use", "id": i, "name": "step", "input": {"n": turn}} for i in ids]
        return [{"role": "assistant", "content": blocks}]
    if provider == "openai-chat":
        tool_calls = [{"id": i, "type": "function", "function": {"name": "step", "arguments": "{}"}} for i in ids]
        return [{"role": "assistant", "content": None, "tool_calls": tool_calls}]
    reasoning = [{"type": "reasoning", "id": f"rs{turn}", "summary": [], "encrypted_content": "e" * 40}]
    return reasoning + [{"type": "function_call", "call_id": i, "name": "step", "arguments": "{}"} for i in ids]


@pytest.mark.parametrize("provider", ["anthropic", "openai-chat", "openai-responses"])
@pytest.mark.parametrize("keep_recent", [1, 30, 80, 200])
def test_the_cut_always_falls_between_whole_turns(provider: str, keep_recent: int) -> None:
    rules = RULES[provider]
    messages: list[Any] = rules.start_messages("task")
    for turn in range(6):
        answer = _turn(provider, turn, calls=turn % 3 + 1)
        messages += answer
        ids = [f"c{turn}_{i}" for i in range(turn % 3 + 1)]
        calls = [ToolCall(i, "step", {}, "k") for i in ids]
        messages += rules.tool_result_messages(calls, [ToolResult(i, "r" * 20) for i in ids])
    state = RunState(run_id="r", task="task", messages=messages)
    cut = Compactor(threshold_tokens=keep_recent + 1, keep_recent_tokens=keep_recent).cut(state, rules)  # type: ignore[arg-type]
    assert cut is not None
    assert rules.dangling_call_ids(messages[:cut]) == []
    window = rules.start_messages("summary") + messages[cut:]
    assert rules.dangling_call_ids(window) == []
    answered_in_window = {m.get("tool_call_id") or m.get("call_id") for m in window if isinstance(m, dict)}
    for message in messages[:cut]:
        for call_id in rules.dangling_call_ids([message]):
            assert call_id not in answered_in_window


def test_the_window_must_be_smaller_than_the_threshold() -> None:
    with pytest.raises(ConfigError):
        Compactor(threshold_tokens=100, keep_recent_tokens=100)
