"""Pydantic AI: an agent run that survives a crash, on any unbroken store.

``await run_durably(agent, prompt, run_id=..., store=...)`` runs a Pydantic AI ``Agent`` and
resumes it from where it stopped when an earlier process died during the same run:

* The run's messages are kept in an unbroken run (``_runlog.RunLog``) in Pydantic AI's own
  serialisable form (``ModelMessagesTypeAdapter``), saved after every step of its graph: after
  the model answers (its tool calls pending) and after the tools answer. A resume hands the
  saved messages back as ``message_history``; Pydantic AI then runs the calls the last answer
  left without results, and asks the model nothing it already answered.
* Every tool call passes the effect ledger (``_effects``) through a capability added to the run
  (``wrap_tool_execute``), keyed by the call's occurrence (the saved answer's place in the
  history, the call's position in it, the provider's id; never the id alone, which servers
  reuse). ``read_only`` tools run again; ``idempotent`` ones run again with the same
  ``current_call().idempotency_key``; a ``side_effect`` (the default) that was interrupted is
  asked to its probe, and without one is answered UNKNOWN OUTCOME, never run twice.
* One writer per run: the run's lease is taken for the duration of the call (``LeaseHeld``
  when another live process runs it).

A finished run is not run again: ``run_durably`` returns its saved output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, ToolCallPart
from pydantic_ai.tools import RunContext, ToolDefinition

from ..errors import ConfigError, TaskMismatch
from ..leases import make_owner, take_lease
from ..ledger import EffectLedger
from ..state import EFFECTS, Effect, JSONValue, ToolCall, occurrence_key
from ..stores.base import Store
from ..stores.offload import off_loop
from ..tools import Probe
from . import _effects
from ._effects import CURRENT_CALL, current_call
from ._runlog import RunLog, log_id

LOG_PREFIX = "pydantic-ai."


@dataclass(frozen=True)
class DurableRunResult:
    """How ``run_durably`` ended: the agent's ``output`` (as JSON for a run finished earlier),
    its whole message history, and whether this call resumed an interrupted run."""

    run_id: str
    output: Any
    messages: list[ModelMessage]
    resumed: bool


def _dump(messages: Sequence[ModelMessage]) -> list[JSONValue]:
    dumped: list[JSONValue] = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    return dumped


class _DurableRun(AbstractCapability[Any]):
    """What ``run_durably`` adds to one run: the ledger around each tool call, and a save of
    the messages after each step."""

    def __init__(self, log: RunLog, effects: Mapping[str, Effect], probes: Mapping[str, Probe]) -> None:
        super().__init__()
        self.log = log
        self.ledger = EffectLedger(log.store, log.run_id)
        self.effects = dict(effects)
        self.probes = dict(probes)
        self.saved: list[JSONValue] = list(log.items())

    # ------------------------------------------------------------------ saving the messages

    def save(self, messages: Sequence[ModelMessage]) -> None:
        """Append what is new; rewrite the saved list in the rare case an earlier one changed."""
        dumped = _dump(messages)
        if dumped[: len(self.saved)] == self.saved:
            if len(dumped) > len(self.saved):
                self.log.append(dumped[len(self.saved) :])
        else:
            self.log.rewrite(dumped, dict(self.log.head()))
        self.saved = dumped

    async def after_node_run(self, ctx: RunContext[Any], *, node: Any, result: Any) -> Any:
        await off_loop(self.ledger.store, self.save, ctx.messages)
        return result

    # ------------------------------------------------------------------ tools through the ledger

    def key(self, ctx: RunContext[Any], call: ToolCallPart) -> str:
        """The call's occurrence: the answer holding it (its place in the history), its
        position among that answer's calls, and the provider's id."""
        for index in range(len(ctx.messages) - 1, -1, -1):
            message = ctx.messages[index]
            if not isinstance(message, ModelResponse):
                continue
            calls = [part for part in message.parts if isinstance(part, ToolCallPart)]
            for position, part in enumerate(calls):
                if part is call:
                    return occurrence_key(self.log.run_id, index, position, call.tool_call_id)
            for position, part in enumerate(calls):
                if part.tool_call_id == call.tool_call_id and part.tool_name == call.tool_name:
                    return occurrence_key(self.log.run_id, index, position, call.tool_call_id)
        raise ConfigError(f"tool call {call.tool_call_id} ({call.tool_name}) is not in the run's messages")

    async def wrap_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: Any, handler: Any
    ) -> Any:
        effect = self.effects.get(call.tool_name, "side_effect")
        arguments = call.args_as_dict()
        tool_call = ToolCall(call.tool_call_id, call.tool_name, arguments, self.key(ctx, call))
        step = await off_loop(
            self.ledger.store, _effects.before, self.ledger, tool_call, effect, self.probes.get(call.tool_name)
        )
        if isinstance(step, _effects.Answered):
            return step.content
        token = CURRENT_CALL.set(tool_call)
        try:
            result = await handler(args)
        except Exception:
            await off_loop(self.ledger.store, _effects.interrupted, self.ledger, step)
            raise
        finally:
            CURRENT_CALL.reset(token)
        content = result if isinstance(result, str) else json.dumps(result, default=str)
        await off_loop(self.ledger.store, _effects.after, self.ledger, step, tool_call, content)
        return result


async def run_durably(
    agent: Agent[Any, Any],
    prompt: str | None,
    *,
    run_id: str,
    store: Store,
    effects: Mapping[str, Effect] | None = None,
    probes: Mapping[str, Probe] | None = None,
    lease_ttl: float = 30.0,
    **run_options: Any,
) -> DurableRunResult:
    """Run ``prompt`` on ``agent`` as the durable run ``run_id``, or resume that run if an
    earlier process died during it (``prompt`` may then be None; a different prompt raises
    ``TaskMismatch``). ``effects`` gives each tool's class by name (undeclared tools are side
    effects), ``probes`` a side effect's probe. ``run_options`` go to ``Agent.run``."""
    for name, effect in (effects or {}).items():
        if effect not in EFFECTS:
            raise ConfigError(f"effect of tool {name!r} must be one of {', '.join(EFFECTS)}, not {effect!r}")
    log = RunLog(store, log_id(LOG_PREFIX, run_id), kind="pydantic-ai-run")
    guard = take_lease(store, log.run_id, make_owner(), lease_ttl)
    try:
        return await _run(agent, prompt, log, effects or {}, probes or {}, run_options)
    finally:
        guard.release()


async def _run(
    agent: Agent[Any, Any],
    prompt: str | None,
    log: RunLog,
    effects: Mapping[str, Effect],
    probes: Mapping[str, Probe],
    run_options: dict[str, Any],
) -> DurableRunResult:
    log.refresh()
    head = dict(log.head())
    if log.exists():
        if prompt is not None and head.get("prompt") != prompt:
            raise TaskMismatch(
                f"run {log.run_id!r} was started with another prompt; pass the same prompt (or None) to resume it"
            )
        history = ModelMessagesTypeAdapter.validate_python(log.items())
        if head.get("status") == "completed":
            return DurableRunResult(log.run_id, head.get("output"), history, resumed=False)
        run = _DurableRun(log, effects, probes)
        result = await agent.run(None, message_history=history, capabilities=[run], **run_options)
        resumed = True
    else:
        if prompt is None:
            raise ConfigError(f"no run {log.run_id!r} to resume in {log.store.url}; give a prompt to start it")
        log.append(head={"prompt": prompt, "status": "running"})
        run = _DurableRun(log, effects, probes)
        result = await agent.run(prompt, capabilities=[run], **run_options)
        resumed = False
    output = result.output
    saved_output = output if isinstance(output, (str, int, float, bool)) or output is None else _json(output)
    run.save(result.all_messages())
    log.append(head={**head, "prompt": head.get("prompt", prompt), "status": "completed", "output": saved_output})
    return DurableRunResult(log.run_id, output, result.all_messages(), resumed)


def _json(value: Any) -> JSONValue:
    from pydantic import TypeAdapter

    dumped: JSONValue = TypeAdapter(type(value)).dump_python(value, mode="json")
    return dumped


__all__ = ["DurableRunResult", "current_call", "run_durably"]
