"""Deny, fork and export from the inspector run the same ``ops`` operations as the CLI; the page's
data comes from the provider's own messages; the package stays optional."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_agents import approval_agent
from ui_server import Server, action_headers, request, start_server

from unbroken import open_store, ops
from unbroken.message_parts import render_message


@pytest.fixture(scope="module")
def acting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-actions') / 'runs.db'}"
    with open_store(url) as store:
        for run_id in ("deny-me", "fork-me"):
            approval_agent(store, []).run("Pay ACME", run_id=run_id)
    server = start_server(url, actions=True)
    yield server, url
    server.stop()


def test_denying_from_the_page_records_the_denial_and_the_call_never_runs(acting: tuple[Server, str]) -> None:
    server, url = acting
    body = {"call_id": "toolu_wire", "reason": "not this month"}
    status, done = request(server, "POST", "/api/runs/deny-me/deny", body, action_headers(server))
    assert status == 200 and done["status"] == "denied"
    transfers: list[str] = []
    with open_store(url) as store:
        assert approval_agent(store, transfers).run(run_id="deny-me").status == "completed"
    assert transfers == []


def test_forking_at_a_save_point_makes_a_new_run_sharing_the_history_up_to_it(acting: tuple[Server, str]) -> None:
    server, url = acting
    status, made = request(server, "POST", "/api/runs/fork-me/fork", {"at": 2}, action_headers(server))
    assert status == 200, made
    with open_store(url) as store:
        first = store.history(made["run_id"])[0]
        original = store.load("fork-me")
        forked = store.load(made["run_id"])
    assert first.label == "forked from fork-me at save 2"
    assert forked.messages == original.messages[: len(forked.messages)]


def test_export_returns_what_ops_export_run_returns(acting: tuple[Server, str]) -> None:
    server, url = acting
    status, exported = request(server, "POST", "/api/runs/fork-me/export", {}, action_headers(server))
    assert status == 200
    with open_store(url) as store:
        expected = ops.export_run(store, "fork-me")
    assert {key: value for key, value in exported.items() if key != "exported_at"} == {
        key: value for key, value in expected.items() if key != "exported_at"
    }


def test_an_action_on_a_run_that_does_not_exist_says_so(acting: tuple[Server, str]) -> None:
    server, _ = acting
    status, body = request(server, "POST", "/api/runs/nope/approve", {"call_id": "x"}, action_headers(server))
    assert status == 404 and "nope" in body["error"]


def test_openai_chat_messages_show_tool_calls_with_parsed_arguments_and_tool_results() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "refund", "arguments": '{"order": "A-17"}'}}
    assistant = render_message("openai-chat", 1, {"role": "assistant", "content": "On it.", "tool_calls": [call]})
    assert assistant["parts"] == [
        {"kind": "text", "text": "On it."},
        {"kind": "tool_call", "id": "call_1", "name": "refund", "arguments": {"order": "A-17"}},
    ]
    tool = render_message("openai-chat", 2, {"role": "tool", "tool_call_id": "call_1", "content": "refunded"})
    assert tool["parts"] == [{"kind": "tool_result", "id": "call_1", "text": "refunded", "is_error": False}]


def test_openai_responses_items_show_reasoning_calls_and_outputs() -> None:
    reasoning = render_message("openai-responses", 1, {"type": "reasoning", "summary": [{"text": "think"}]})
    call = render_message(
        "openai-responses", 2, {"type": "function_call", "call_id": "c1", "name": "refund", "arguments": "{}"}
    )
    output = render_message("openai-responses", 3, {"type": "function_call_output", "call_id": "c1", "output": "ok"})
    assert reasoning["parts"] == [{"kind": "thinking", "text": "think"}]
    assert call["parts"] == [{"kind": "tool_call", "id": "c1", "name": "refund", "arguments": {}}]
    assert (output["role"], output["parts"][0]["text"]) == ("tool", "ok")


def test_anthropic_error_results_are_marked_and_thinking_is_its_own_part() -> None:
    message = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}],
    }
    assert render_message("anthropic", 4, message)["parts"] == [
        {"kind": "tool_result", "id": "t1", "text": "boom", "is_error": True}
    ]
    thinking = {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}]}
    assert render_message("anthropic", 5, thinking)["parts"] == [{"kind": "thinking", "text": "hmm"}]


def test_import_unbroken_never_imports_the_web_stack_and_the_command_names_the_extra(tmp_path: Path) -> None:
    code = "import sys, unbroken, unbroken.cli; print(sorted(m for m in ('starlette', 'uvicorn') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
    missing = (
        "import sys; sys.modules['starlette'] = None; from unbroken.cli import main; "
        f"main(['ui', '--store', 'sqlite:///{tmp_path / 'runs.db'}'])"
    )
    (tmp_path / "runs.db").touch()
    done = subprocess.run([sys.executable, "-c", missing], capture_output=True, text=True)
    assert done.returncode != 0
    assert "pip install 'unbroken[ui]'" in done.stderr + done.stdout
