"""Hooks and OpenTelemetry spans (issue 11 item 5)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from features_child import SCRIPT, make_agent
from features_crash import child, sent
from features_scripts import USAGE, final_turn, tool_turn
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from unbroken import Agent, LeaseLost, ScriptedModel, ToolCall, open_store, tool
from unbroken.hooks import (
    ApprovalRequested,
    Event,
    LeaseWasLost,
    ModelCallEnded,
    ModelCallStarted,
    ReconcileDecision,
    RunEnded,
    RunStarted,
    SavePoint,
    ToolEnded,
    ToolStarted,
)
from unbroken.otel import OtelHook


def reading_agent(events: list[Event], **options: Any) -> Agent:
    @tool(effect="read_only")
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    script = [tool_turn(("c1", "read_file", {"path": "a.txt"})), final_turn("read it")]
    options.setdefault("hooks", [events.append])
    return Agent(ScriptedModel(script), [read_file], open_store("memory://"), **options)


def brief(event: Event) -> tuple[Any, ...]:
    if isinstance(event, SavePoint):
        return ("save", event.label)
    if isinstance(event, ToolStarted):
        return ("tool_start", event.tool, event.effect)
    if isinstance(event, ToolEnded):
        return ("tool_end", event.tool, event.outcome)
    if isinstance(event, ModelCallEnded):
        return ("model_end", event.turn, event.tokens)
    if isinstance(event, ModelCallStarted):
        return ("model_start", event.turn)
    if isinstance(event, RunEnded):
        return ("run_end", event.status)
    return (type(event).__name__,)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_hooks_see_every_step_of_a_run_in_order(driver: str) -> None:
    events: list[Event] = []
    agent = reading_agent(events)
    if driver == "async":
        asyncio.run(agent.arun("read", run_id="r1"))
    else:
        agent.run("read", run_id="r1")
    assert [brief(event) for event in events] == [
        ("save", "start"),
        ("RunStarted",),
        ("model_start", 1),
        ("save", "model_turn"),
        ("model_end", 1, 120),
        ("tool_start", "read_file", "read_only"),
        ("save", "tools_done"),
        ("tool_end", "read_file", "executed"),
        ("model_start", 2),
        ("save", "completed"),
        ("model_end", 2, 120),
        ("run_end", "completed"),
    ]
    model_end = next(event for event in events if isinstance(event, ModelCallEnded))
    assert model_end.usage == USAGE and model_end.seconds >= 0


def test_a_hook_that_raises_never_changes_the_run(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("dashboard down")

    result = reading_agent([], hooks=[broken]).run("read", run_id="r1")
    assert result.status == "completed"
    assert "dashboard down" in caplog.text or "RuntimeError" in caplog.text


def test_a_resume_reports_how_each_dangling_call_was_decided(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "outbox.jsonl"
    args = ["run", "--store", url, "--run-id", "r1", "--outbox", str(outbox), "--no-approval"]
    child(*args, crash_at="tool.after_execute:1")  # a was sent, its result not saved; b never started
    events: list[Event] = []
    agent = make_agent(url, str(outbox), SCRIPT, approval=False).replace(hooks=[events.append])
    assert agent.run(run_id="r1").status == "completed"
    decisions = [(e.call_id, e.action, e.outcome) for e in events if isinstance(e, ReconcileDecision)]
    assert decisions == [("toolu_a", "answer", "probed"), ("toolu_b", "execute", None)]
    assert [(e.call_id, e.outcome) for e in events if isinstance(e, ToolEnded)] == [
        ("toolu_a", "probed"),
        ("toolu_b", "executed"),
    ]
    assert next(e for e in events if isinstance(e, RunStarted)).resumed is True
    assert sent(outbox) == ["a@example.com", "b@example.com"]


def test_an_approval_request_is_an_event(tmp_path: Path) -> None:
    events: list[Event] = []
    agent = make_agent(f"sqlite:///{tmp_path / 'r.db'}", str(tmp_path / "o"), SCRIPT).replace(hooks=[events.append])
    assert agent.run("Email a and b", run_id="r1").status == "awaiting_approval"
    asked = [(e.call_id, e.input["to"]) for e in events if isinstance(e, ApprovalRequested)]
    assert asked == [("toolu_a", "a@example.com"), ("toolu_b", "b@example.com")]


def test_a_lost_lease_is_an_event() -> None:
    events: list[Event] = []
    store = open_store("memory://")

    @tool(effect="side_effect")
    def hand_over(*, call: ToolCall) -> str:
        """Let another worker take the run over (as if this one had stalled)."""
        holder = store.lease_of("r1")
        assert holder is not None
        store.acquire_lease("r1", "thief:1:2:3", 60.0, takeover_from=holder.owner)
        return "done"

    script = [tool_turn(("c1", "hand_over", {})), final_turn()]
    agent = Agent(ScriptedModel(script), [hand_over], store, hooks=[events.append])
    with pytest.raises(LeaseLost):
        agent.run("go", run_id="r1")
    assert [type(e) for e in events][-2:] == [LeaseWasLost, RunEnded]


def test_otel_spans_follow_the_genai_conventions() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reading_agent([], hooks=[OtelHook(provider)]).run("read", run_id="r1")
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"invoke_agent unbroken", "chat anthropic", "execute_tool read_file"}
    run, chat, tool_span = spans["invoke_agent unbroken"], spans["chat anthropic"], spans["execute_tool read_file"]
    assert run.attributes is not None and chat.attributes is not None and tool_span.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.conversation.id"] == "r1"
    assert run.attributes["unbroken.run.status"] == "completed"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "anthropic"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 100
    assert chat.attributes["gen_ai.usage.output_tokens"] == 20
    assert tool_span.attributes["gen_ai.tool.name"] == "read_file"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "c1"
    assert tool_span.attributes["unbroken.tool.effect"] == "read_only"
    assert tool_span.attributes["unbroken.tool.outcome"] == "executed"
    for child_span in (chat, tool_span):
        assert child_span.parent is not None and child_span.parent.span_id == run.context.span_id
    assert "unbroken.save_point" in [event.name for event in run.events]


def test_otel_marks_a_failed_model_call_as_an_error() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent(ScriptedModel([]), [], open_store("memory://"), hooks=[OtelHook(provider)])
    with pytest.raises(Exception, match="model call"):
        agent.run("go", run_id="r1")
    chat = next(span for span in exporter.get_finished_spans() if span.name.startswith("chat"))
    assert chat.status.status_code.name == "ERROR"
    assert chat.attributes is not None and chat.attributes["error.type"] == "ScriptExhausted"


def test_import_unbroken_never_imports_opentelemetry() -> None:
    code = (
        "import sys, unbroken; assert not [m for m in sys.modules if m.startswith(('opentelemetry', 'unbroken.otel'))]"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
