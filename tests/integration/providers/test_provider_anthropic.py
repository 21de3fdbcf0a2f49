"""AnthropicModel on the real ``anthropic`` SDK against a scripted local server."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from provider_agents import SYSTEM, TASK, TOOLS, build_model, fails_then_resumes
from provider_server import (
    ANTHROPIC_SCRIPT,
    ProviderServer,
    anthropic_message,
    assistant_turns,
    failing_first,
    scripted,
)

from unbroken import Agent, ConfigError, open_store, tool
from unbroken.providers import AnthropicModel


def agent_for(server: ProviderServer, script: list[dict[str, Any]], **options: Any) -> Agent:
    server.responder = scripted(script, assistant_turns)
    use_async = options.pop("use_async", False)
    max_retries = options.pop("max_retries", 0)
    tools = options.pop("tools", TOOLS)
    model = build_model("anthropic", server.url, use_async=use_async, max_retries=max_retries, **options)
    return Agent(model=model, tools=tools, store=open_store("memory://"), system=SYSTEM)


def test_every_block_comes_back_to_the_api_exactly_as_it_was_returned(server: ProviderServer) -> None:
    result = agent_for(server, ANTHROPIC_SCRIPT).run(TASK, run_id="blocks")
    assert result.status == "completed"
    sent = server.sent()
    assert sent[1]["messages"][1] == {"role": "assistant", "content": ANTHROPIC_SCRIPT[0]["content"]}
    assert sent[2]["messages"][3] == {"role": "assistant", "content": ANTHROPIC_SCRIPT[1]["content"]}
    assert result.state is not None
    assert result.state.messages[3]["content"][3] == {
        "type": "block_from_the_future",
        "payload": {"kept": [1, 2.5, None]},
    }


def test_parallel_results_go_back_in_one_user_message_of_tool_results_only(server: ProviderServer) -> None:
    agent_for(server, ANTHROPIC_SCRIPT).run(TASK, run_id="parallel")
    reply = server.sent()[1]["messages"][2]
    assert reply == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Paris: 21C, clear"},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "saved note 'Paris'"},
        ],
    }


def test_a_call_to_an_unknown_tool_is_answered_with_is_error_and_the_run_goes_on(server: ProviderServer) -> None:
    result = agent_for(server, ANTHROPIC_SCRIPT).run(TASK, run_id="unknown-tool")
    answer = server.sent()[2]["messages"][4]["content"]
    assert answer[0]["tool_use_id"] == "toolu_03" and answer[0]["is_error"] is True
    assert "no_such_tool" in answer[0]["content"]
    assert answer[1] == {"type": "tool_result", "tool_use_id": "toolu_04", "content": "Oslo: 21C, clear"}
    assert result.status == "completed"


def test_the_system_prompt_and_tools_are_sent_with_every_request(server: ProviderServer) -> None:
    agent_for(server, ANTHROPIC_SCRIPT).run(TASK, run_id="request")
    first = server.sent()[0]
    assert first["system"] == SYSTEM and first["model"] == "claude-test" and first["max_tokens"] == 1024
    assert [t["name"] for t in first["tools"]] == ["lookup", "save_note"]
    assert first["messages"] == [{"role": "user", "content": TASK}]


def test_usage_is_kept_whole_and_tokens_count_cache_tokens(server: ProviderServer) -> None:
    result = agent_for(server, ANTHROPIC_SCRIPT).run(TASK, run_id="usage")
    assert result.state is not None
    assert result.state.usage["cache_creation_input_tokens"] == 7
    assert result.state.usage["cache_read_input_tokens"] == 3
    assert result.tokens_used == 3 * 15 + 7 + 3


def test_a_tool_use_cut_off_by_max_tokens_is_answered_with_is_error_and_never_run(server: ProviderServer) -> None:
    calls: list[str] = []
    script = [
        anthropic_message(
            [
                {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"city": "Rome"}},
                {"type": "tool_use", "id": "toolu_b", "name": "save_note", "input": {}},
            ],
            "max_tokens",
        ),
        anthropic_message([{"type": "text", "text": "ok"}], "end_turn"),
    ]

    @tool
    def save_note(text: str) -> str:
        """Save a note."""
        calls.append(text)
        return "saved"

    result = agent_for(server, script, tools=[TOOLS[0], save_note]).run(TASK, run_id="max-tokens")
    results = server.sent()[1]["messages"][2]["content"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "toolu_a", "content": "Rome: 21C, clear"}
    assert results[1]["is_error"] is True and "max_tokens" in results[1]["content"]
    assert calls == []
    assert result.status == "completed"


def test_max_tokens_without_a_call_finishes_with_the_text_so_far(server: ProviderServer) -> None:
    script = [anthropic_message([{"type": "text", "text": "The answer is"}], "max_tokens")]
    result = agent_for(server, script).run(TASK, run_id="cut")
    assert (result.status, result.output, len(server.requests)) == ("completed", "The answer is", 1)


def test_pause_turn_calls_again_with_the_paused_content_appended(server: ProviderServer) -> None:
    paused = [{"type": "server_tool_use", "id": "srvtoolu_9", "name": "web_search", "input": {"query": "x"}}]
    script = [
        anthropic_message(paused, "pause_turn"),
        anthropic_message([{"type": "text", "text": "found it"}], "end_turn"),
    ]
    result = agent_for(server, script).run(TASK, run_id="pause")
    second = server.sent()[1]["messages"]
    assert second == [{"role": "user", "content": TASK}, {"role": "assistant", "content": paused}]
    assert (result.status, result.output, result.turns) == ("completed", "found it", 2)


def test_a_refusal_finishes_the_run_and_is_recorded(server: ProviderServer) -> None:
    result = agent_for(server, [anthropic_message([], "refusal")]).run(TASK, run_id="refusal")
    assert result.status == "completed" and result.output == "(the model refused to answer)"
    assert result.state is not None and result.state.messages[-1] == {"role": "assistant", "content": []}


def test_a_429_without_retries_fails_the_call_and_the_run_resumes_later(server: ProviderServer) -> None:
    agent = agent_for(server, ANTHROPIC_SCRIPT)
    server.responder = failing_first(1, 429, scripted(ANTHROPIC_SCRIPT, assistant_turns))
    result = fails_then_resumes(agent, "rate-limited", anthropic.RateLimitError)
    assert result.status == "completed" and result.resumed
    bodies = server.bodies()
    assert bodies[0] == bodies[1]  # the failed request is sent again unchanged


def test_with_retries_the_sdk_retries_a_500_itself(server: ProviderServer) -> None:
    agent = agent_for(server, ANTHROPIC_SCRIPT, max_retries=2)
    server.responder = failing_first(
        2, 500, scripted(ANTHROPIC_SCRIPT, assistant_turns), headers={"retry-after-ms": "1"}
    )
    result = agent.run(TASK, run_id="retried")
    assert result.status == "completed"
    assert len(server.requests) == 5


def test_an_async_client_drives_arun(server: ProviderServer) -> None:
    result = asyncio.run(agent_for(server, ANTHROPIC_SCRIPT, use_async=True).arun(TASK, run_id="async"))
    assert (result.status, len(server.requests)) == ("completed", 3)


def test_a_sync_client_also_drives_arun(server: ProviderServer) -> None:
    result = asyncio.run(agent_for(server, ANTHROPIC_SCRIPT).arun(TASK, run_id="sync-in-async"))
    assert (result.status, len(server.requests)) == ("completed", 3)


def test_complete_with_an_async_client_is_a_config_error_naming_the_fix() -> None:
    model = AnthropicModel(anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9"), model="m")
    with pytest.raises(ConfigError, match=r"async client; use Agent\.arun"):
        model.complete([{"role": "user", "content": "hi"}], [], None)


def test_a_history_with_an_unanswered_tool_use_is_never_sent(server: ProviderServer) -> None:
    model = build_model("anthropic", server.url)
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_x", "name": "lookup", "input": {}}]},
    ]
    with pytest.raises(ValueError, match="toolu_x"):
        model.complete(history, [], None)
    assert server.requests == []
