"""OpenTelemetry spans for runs, following the GenAI semantic conventions (extra ``unbroken[otel]``).

::

    from unbroken.otel import OtelHook
    agent = Agent(model, tools, hooks=[OtelHook()])   # uses the global tracer provider

One span per run call (``invoke_agent``), a child per model call (``chat {model}``, with
``gen_ai.usage.input_tokens`` / ``output_tokens``) and per tool call (``execute_tool {name}``,
with the tool's effect class and how its result came about). Save points, reconcile decisions,
approval requests and a lost lease are events on the run span. A resumed run is a new
``invoke_agent`` span with the same ``gen_ai.conversation.id`` (the run id).

Importing this module needs ``opentelemetry-api``; ``import unbroken`` never imports it.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from .hooks import (
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

_INPUT_KEYS = ("input_tokens", "prompt_tokens")
_OUTPUT_KEYS = ("output_tokens", "completion_tokens")


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _first(usage: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int):
            return value
    return None


class OtelHook:
    """A hook (``Agent(hooks=[OtelHook()])``) that turns run events into spans."""

    def __init__(self, tracer_provider: TracerProvider | None = None, agent_name: str = "unbroken") -> None:
        self.tracer = trace.get_tracer("unbroken", tracer_provider=tracer_provider)
        self.agent_name = agent_name
        self._runs: dict[str, Span] = {}
        self._models: dict[str, Span] = {}
        self._tools: dict[tuple[str, str], Span] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self._run_started(event)
        elif isinstance(event, RunEnded):
            self._run_ended(event)
        elif isinstance(event, ModelCallStarted):
            self._model_started(event)
        elif isinstance(event, ModelCallEnded):
            self._model_ended(event)
        elif isinstance(event, ToolStarted):
            self._tool_started(event)
        elif isinstance(event, ToolEnded):
            self._tool_ended(event)
        else:
            self._run_event(event)

    # ------------------------------------------------------------------ spans

    def _context(self, run_id: str) -> Any:
        run = self._runs.get(run_id)
        return trace.set_span_in_context(run) if run is not None else None

    def _run_started(self, event: RunStarted) -> None:
        span = self.tracer.start_span(
            f"invoke_agent {self.agent_name}",
            kind=SpanKind.INTERNAL,
            start_time=_ns(event.at),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent_name,
                "gen_ai.conversation.id": event.run_id,
                "unbroken.run.resumed": event.resumed,
                "unbroken.run.save_seq": event.save_seq,
            },
        )
        self._runs[event.run_id] = span

    def _run_ended(self, event: RunEnded) -> None:
        span = self._runs.pop(event.run_id, None)
        if span is None:
            return
        span.set_attribute("unbroken.run.status", event.status)
        span.set_attribute("unbroken.run.turns", event.turns)
        span.set_attribute("unbroken.run.tokens_used", event.tokens_used)
        if event.error is not None:
            span.set_status(Status(StatusCode.ERROR, event.error))
            span.set_attribute("error.type", event.error.split(":", 1)[0])
        span.end(end_time=_ns(event.at))

    def _model_started(self, event: ModelCallStarted) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": event.provider,
            "gen_ai.conversation.id": event.run_id,
            "unbroken.turn": event.turn,
        }
        if event.model is not None:
            attributes["gen_ai.request.model"] = event.model
        span = self.tracer.start_span(
            f"chat {event.model or event.provider}",
            context=self._context(event.run_id),
            kind=SpanKind.CLIENT,
            start_time=_ns(event.at),
            attributes=attributes,
        )
        self._models[event.run_id] = span

    def _model_ended(self, event: ModelCallEnded) -> None:
        span = self._models.pop(event.run_id, None)
        if span is None:
            return
        for name, keys in (("gen_ai.usage.input_tokens", _INPUT_KEYS), ("gen_ai.usage.output_tokens", _OUTPUT_KEYS)):
            value = _first(event.usage, keys)
            if value is not None:
                span.set_attribute(name, value)
        if event.error is not None:
            span.set_status(Status(StatusCode.ERROR, event.error))
            span.set_attribute("error.type", event.error.split(":", 1)[0])
        span.end(end_time=_ns(event.at))

    def _tool_started(self, event: ToolStarted) -> None:
        span = self.tracer.start_span(
            f"execute_tool {event.tool}",
            context=self._context(event.run_id),
            kind=SpanKind.INTERNAL,
            start_time=_ns(event.at),
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": event.tool,
                "gen_ai.tool.call.id": event.call_id,
                "gen_ai.tool.type": "function",
                "unbroken.tool.effect": event.effect,
            },
        )
        self._tools[(event.run_id, event.call_id)] = span

    def _tool_ended(self, event: ToolEnded) -> None:
        span = self._tools.pop((event.run_id, event.call_id), None)
        if span is None:  # settled without running now (reused, probed, denied, ...): a point span
            span = self.tracer.start_span(
                f"execute_tool {event.tool}",
                context=self._context(event.run_id),
                kind=SpanKind.INTERNAL,
                start_time=_ns(event.at),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": event.tool,
                    "gen_ai.tool.call.id": event.call_id,
                    "gen_ai.tool.type": "function",
                },
            )
            if event.effect is not None:
                span.set_attribute("unbroken.tool.effect", event.effect)
        span.set_attribute("unbroken.tool.outcome", event.outcome)
        if event.is_error:
            span.set_status(Status(StatusCode.ERROR, f"the call's result is an error ({event.outcome})"))
            span.set_attribute("error.type", "tool_error")
        span.end(end_time=_ns(event.at))

    def _run_event(self, event: Event) -> None:
        span = self._runs.get(event.run_id)
        if span is None:
            return
        if isinstance(event, SavePoint):
            span.add_event(
                "unbroken.save_point",
                {"unbroken.save.seq": event.seq, "unbroken.save.label": event.label, "unbroken.run.phase": event.phase},
                timestamp=_ns(event.at),
            )
        elif isinstance(event, ReconcileDecision):
            attributes = {
                "gen_ai.tool.call.id": event.call_id,
                "gen_ai.tool.name": event.tool,
                "unbroken.reconcile.action": event.action,
                "unbroken.reconcile.outcome": event.outcome or "",
                "unbroken.reconcile.reason": event.reason,
            }
            span.add_event("unbroken.reconcile", attributes, timestamp=_ns(event.at))
        elif isinstance(event, ApprovalRequested):
            attributes = {
                "gen_ai.tool.call.id": event.call_id,
                "gen_ai.tool.name": event.tool,
                "unbroken.approval.digest": event.digest,
            }
            span.add_event("unbroken.approval_requested", attributes, timestamp=_ns(event.at))
        elif isinstance(event, LeaseWasLost):
            span.add_event("unbroken.lease_lost", {"unbroken.reason": event.reason}, timestamp=_ns(event.at))
