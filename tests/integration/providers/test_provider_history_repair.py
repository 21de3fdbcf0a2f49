"""Validate before send: a stored history with a tool call that has no result (and is not a
pending call) is repaired through the reconcile path before the model is called, so the
provider never sees a dangling call; the call is answered exactly once, never dropped."""

from __future__ import annotations

from typing import Any

from provider_agents import TASK, TOOLS, build_model
from provider_server import (
    ProviderServer,
    anthropic_message,
    assistant_turns,
    chat_completion,
    response_body,
    responses_turns,
    scripted,
)

from unbroken import Agent, RunState, Store, open_store
from unbroken.codec import encode_full
from unbroken.providers import anthropic_format, openai_format


def stored_run(messages: list[Any], provider: str) -> Store:
    store = open_store("memory://")
    state = RunState(run_id="broken", task=TASK, provider=provider, messages=messages, save_seq=1, turns=1)
    store.append(encode_full(state, "start"), expect_seq=0)
    return store


def test_an_unanswered_tool_use_in_the_history_is_answered_before_the_next_request(server: ProviderServer) -> None:
    history = [
        {"role": "user", "content": TASK},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_x", "name": "lookup", "input": {"city": "Oslo"}}],
        },
    ]
    store = stored_run(history, "anthropic")
    done = anthropic_message([{"type": "text", "text": "done"}], "end_turn")
    server.responder = scripted([done, done], assistant_turns)
    result = Agent(model=build_model("anthropic", server.url), tools=TOOLS, store=store).run(None, run_id="broken")

    sent = server.sent()[0]["messages"]
    assert sent[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "Oslo: 21C, clear"}],
    }
    assert anthropic_format.dangling_call_ids(sent) == []
    assert result.status == "completed" and result.reconciled == [("toolu_x", "lookup", "re-run")]
    assert "repaired" in [save.label for save in store.history("broken")]


def test_a_partly_answered_chat_turn_gets_the_missing_tool_message_right_after(server: ProviderServer) -> None:
    calls = [
        {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Rome"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Lima"}'}},
    ]
    history = [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_a", "content": "Rome: 21C, clear"},
    ]
    store = stored_run(history, "openai-chat")
    done = chat_completion({"role": "assistant", "content": "done"}, "stop")
    server.responder = scripted([done, done], assistant_turns)
    Agent(model=build_model("openai-chat", server.url), tools=TOOLS, store=store).run(None, run_id="broken")

    sent = server.sent()[0]["messages"]
    assert sent[3:] == [{"role": "tool", "tool_call_id": "call_b", "content": "Lima: 21C, clear"}]
    assert openai_format.chat_dangling_call_ids(sent) == []


def test_a_dangling_call_to_a_tool_the_agent_lacks_is_answered_with_an_error(server: ProviderServer) -> None:
    call = {"type": "function_call", "id": "fc", "call_id": "call_z", "name": "gone", "arguments": "{}"}
    store = stored_run([{"role": "user", "content": TASK}, call], "openai-responses")
    done = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    server.responder = scripted([response_body([done]), response_body([done])], responses_turns)
    result = Agent(model=build_model("openai-responses", server.url), tools=TOOLS, store=store).run(
        None, run_id="broken"
    )

    answer = server.sent()[0]["input"][2]
    assert answer["call_id"] == "call_z" and "no tool named 'gone'" in answer["output"]
    assert result.status == "completed"
