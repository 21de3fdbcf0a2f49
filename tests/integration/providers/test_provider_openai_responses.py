"""OpenAIResponsesModel on the real ``openai`` SDK against a scripted local server."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from provider_agents import SYSTEM, TASK, TOOLS, build_model, fails_then_resumes
from provider_server import RESPONSES_SCRIPT, ProviderServer, failing_first, response_body, responses_turns, scripted

from unbroken import Agent, open_store


def agent_for(server: ProviderServer, script: list[dict[str, Any]], **options: Any) -> Agent:
    server.responder = scripted(script, responses_turns)
    use_async = options.pop("use_async", False)
    model = build_model("openai-responses", server.url, use_async=use_async, **options)
    return Agent(model=model, tools=TOOLS, store=open_store("memory://"), system=SYSTEM)


def without_id(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if key != "id"}


def test_state_stays_on_the_client_every_request_carries_the_whole_history(server: ProviderServer) -> None:
    agent_for(server, RESPONSES_SCRIPT).run(TASK, run_id="stateless")
    sent = server.sent()
    for body in sent:
        assert body["store"] is False and "previous_response_id" not in body
        assert body["instructions"] == SYSTEM and body["include"] == ["reasoning.encrypted_content"]
        assert body["input"][0] == {"role": "user", "content": TASK}
    assert [len(body["input"]) for body in sent] == [1, 6, 11]


def test_output_items_are_stored_whole_and_sent_back_without_server_ids(server: ProviderServer) -> None:
    result = agent_for(server, RESPONSES_SCRIPT).run(TASK, run_id="items")
    assert result.state is not None
    assert result.state.messages[1:4] == RESPONSES_SCRIPT[0]["output"]
    assert result.state.messages[6:10] == RESPONSES_SCRIPT[1]["output"]
    second, third = server.sent()[1:]
    assert second["input"][1:4] == [without_id(item) for item in RESPONSES_SCRIPT[0]["output"]]
    assert second["input"][1]["encrypted_content"] == "gAAAA-encrypted-reasoning-01"
    # the reasoning item without encrypted_content is kept in the history but cannot be sent with store=False
    assert {"type": "reasoning", "summary": []} not in third["input"]
    assert without_id(RESPONSES_SCRIPT[1]["output"][1]) in third["input"]


def test_results_are_function_call_outputs_paired_by_call_id(server: ProviderServer) -> None:
    agent_for(server, RESPONSES_SCRIPT).run(TASK, run_id="pairs")
    second, third = server.sent()[1:]
    assert second["input"][4:6] == [
        {"type": "function_call_output", "call_id": "call_01", "output": "Paris: 21C, clear"},
        {"type": "function_call_output", "call_id": "call_02", "output": "saved note 'Paris'"},
    ]
    broken, fine = third["input"][9:11]
    assert broken["call_id"] == "call_03" and broken["output"].startswith("Error: the arguments are not valid JSON")
    assert fine == {"type": "function_call_output", "call_id": "call_04", "output": "Rome: 21C, clear"}


def test_the_final_message_is_the_output_and_usage_is_kept(server: ProviderServer) -> None:
    result = agent_for(server, RESPONSES_SCRIPT).run(TASK, run_id="final")
    assert (result.status, result.output, result.tokens_used) == ("completed", "Paris and Rome are done.", 45)
    assert result.state is not None and result.state.usage["output_tokens_details"] == {"reasoning_tokens": 6}


def test_an_incomplete_response_finishes_with_the_text_it_has(server: ProviderServer) -> None:
    partial = {"type": "message", "id": "m", "role": "assistant", "content": [{"type": "output_text", "text": "Par"}]}
    script = [response_body([partial], "incomplete", incomplete_details={"reason": "max_output_tokens"})]
    result = agent_for(server, script).run(TASK, run_id="incomplete")
    assert (result.status, result.output) == ("completed", "Par")


def test_a_429_without_retries_fails_the_call_and_the_run_resumes_later(server: ProviderServer) -> None:
    agent = agent_for(server, RESPONSES_SCRIPT)
    server.responder = failing_first(2, 429, scripted(RESPONSES_SCRIPT, responses_turns))
    result = fails_then_resumes(agent, "limited", openai.RateLimitError, failures=2, resume_task=TASK)
    assert result.status == "completed" and result.resumed


def test_an_async_client_drives_arun(server: ProviderServer) -> None:
    result = asyncio.run(agent_for(server, RESPONSES_SCRIPT, use_async=True).arun(TASK, run_id="async"))
    assert (result.status, len(server.requests)) == ("completed", 3)


def test_a_history_with_an_unanswered_call_is_never_sent(server: ProviderServer) -> None:
    model = build_model("openai-responses", server.url)
    history = [{"role": "user", "content": "hi"}, *RESPONSES_SCRIPT[0]["output"]]
    with pytest.raises(ValueError, match="call_01, call_02"):
        model.complete(history, [], None)
    assert server.requests == []
