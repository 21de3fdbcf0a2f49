"""OpenAIChatModel on the real ``openai`` SDK against a scripted local server."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from provider_agents import SYSTEM, TASK, TOOLS, build_model, fails_then_resumes
from provider_server import CHAT_SCRIPT, ProviderServer, assistant_turns, chat_completion, failing_first, scripted

from unbroken import Agent, ConfigError, open_store, tool
from unbroken.providers import OpenAIChatModel


def agent_for(server: ProviderServer, script: list[dict[str, Any]], **options: Any) -> Agent:
    server.responder = scripted(script, assistant_turns)
    tools = options.pop("tools", TOOLS)
    use_async = options.pop("use_async", False)
    max_retries = options.pop("max_retries", 0)
    model = build_model("openai-chat", server.url, use_async=use_async, max_retries=max_retries, **options)
    return Agent(model=model, tools=tools, store=open_store("memory://"), system=SYSTEM)


def test_the_system_prompt_is_sent_first_and_never_stored(server: ProviderServer) -> None:
    result = agent_for(server, CHAT_SCRIPT).run(TASK, run_id="system")
    for body in server.sent():
        assert body["messages"][:2] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    assert result.state is not None and result.state.messages[0] == {"role": "user", "content": TASK}
    assert server.sent()[0]["tools"][0] == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up the weather in a city.",
            "parameters": TOOLS[0].input_schema,
        },
    }


def test_the_assistant_message_is_sent_back_exactly_as_returned(server: ProviderServer) -> None:
    agent_for(server, CHAT_SCRIPT).run(TASK, run_id="lossless")
    sent = server.sent()
    assert sent[1]["messages"][2] == CHAT_SCRIPT[0]["choices"][0]["message"]
    assert sent[2]["messages"][5] == CHAT_SCRIPT[1]["choices"][0]["message"]  # reasoning_content included


def test_each_call_gets_its_own_tool_message(server: ProviderServer) -> None:
    agent_for(server, CHAT_SCRIPT).run(TASK, run_id="parallel")
    assert server.sent()[1]["messages"][3:] == [
        {"role": "tool", "tool_call_id": "call_01", "content": "Paris: 21C, clear"},
        {"role": "tool", "tool_call_id": "call_02", "content": "saved note 'Paris'"},
    ]


def test_arguments_that_are_not_json_are_answered_with_an_error_and_never_run(server: ProviderServer) -> None:
    cities: list[str] = []

    @tool(effect="read_only")
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        cities.append(city)
        return f"{city}: 21C, clear"

    result = agent_for(server, CHAT_SCRIPT, tools=[lookup, TOOLS[1]]).run(TASK, run_id="malformed")
    broken, fine = server.sent()[2]["messages"][6:8]
    assert broken["tool_call_id"] == "call_03" and broken["content"].startswith(
        "Error: the arguments are not valid JSON"
    )
    assert fine == {"role": "tool", "tool_call_id": "call_04", "content": "Rome: 21C, clear"}
    assert cities == ["Paris", "Rome"]
    assert result.status == "completed" and result.output == "Paris and Rome are done."


def test_a_refusal_finishes_the_run_with_the_refusal_as_output(server: ProviderServer) -> None:
    refusal = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    result = agent_for(server, [chat_completion(refusal, "stop")]).run(TASK, run_id="refusal")
    assert (result.status, result.output) == ("completed", "I can't help with that.")
    assert result.state is not None and result.state.messages[-1] == refusal


def test_a_call_cut_off_at_the_length_limit_is_answered_with_an_error(server: ProviderServer) -> None:
    cut = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "R'}}
        ],
    }
    script = [chat_completion(cut, "length"), chat_completion({"role": "assistant", "content": "ok"}, "stop")]
    result = agent_for(server, script).run(TASK, run_id="length")
    answer = server.sent()[1]["messages"][3]
    assert answer["tool_call_id"] == "call_9" and answer["content"].startswith("Error:")
    assert result.status == "completed"


def test_tokens_are_the_reported_total(server: ProviderServer) -> None:
    script = [chat_completion({"role": "assistant", "content": "hi"}, "stop", prompt_tokens=100, total_tokens=130)]
    result = agent_for(server, script).run(TASK, run_id="usage")
    assert result.tokens_used == 130
    assert result.state is not None and result.state.usage["prompt_tokens"] == 100


def test_a_500_without_retries_fails_the_call_and_the_run_resumes_later(server: ProviderServer) -> None:
    agent = agent_for(server, CHAT_SCRIPT)
    server.responder = failing_first(1, 500, scripted(CHAT_SCRIPT, assistant_turns))
    result = fails_then_resumes(agent, "server-error", openai.InternalServerError)
    assert result.status == "completed" and result.resumed


def test_with_retries_the_sdk_retries_a_429_itself(server: ProviderServer) -> None:
    agent = agent_for(server, CHAT_SCRIPT, max_retries=1)
    server.responder = failing_first(1, 429, scripted(CHAT_SCRIPT, assistant_turns), headers={"retry-after-ms": "1"})
    assert agent.run(TASK, run_id="retried").status == "completed"
    assert len(server.requests) == 4


def test_an_async_client_drives_arun(server: ProviderServer) -> None:
    result = asyncio.run(agent_for(server, CHAT_SCRIPT, use_async=True).arun(TASK, run_id="async"))
    assert (result.status, len(server.requests)) == ("completed", 3)


def test_complete_with_an_async_client_is_a_config_error() -> None:
    model = OpenAIChatModel(openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9"), model="m")
    with pytest.raises(ConfigError, match="async client"):
        model.complete([{"role": "user", "content": "hi"}], [], None)


def test_a_history_with_an_unanswered_call_is_never_sent(server: ProviderServer) -> None:
    model = build_model("openai-chat", server.url)
    history = [{"role": "user", "content": "hi"}, CHAT_SCRIPT[0]["choices"][0]["message"]]
    with pytest.raises(ValueError, match="call_01, call_02"):
        model.complete(history, [], None)
    assert server.requests == []
