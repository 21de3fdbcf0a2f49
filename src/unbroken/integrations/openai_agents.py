"""The OpenAI Agents SDK on unbroken's stores (``pip install unbroken[openai-agents]``).

::

    session = UnbrokenSession("order-42", store)
    agent = durable(Agent(name="clerk", model=OpenAIResponsesModel("gpt-5", client), tools=[pay]),
                    session, effects={"pay": "side_effect"})
    result = await run_durably(agent, "Pay invoice 42", session=session)

* ``UnbrokenSession``: the SDK's ``Session`` (conversation history) as an unbroken log: each
  ``add_items`` is one atomic append, durable when it returns.
* ``durable(agent, session)``: the model's every answer is saved before its tool calls run
  (so each call's id, and the idempotency key derived from it, is fixed when the model makes
  the call), and every function tool goes through unbroken's effect ledger.
* ``run_durably(agent, input, session=...)``: starts ``input``, or, when a process died while
  running that same input, resumes it: the saved answer is replayed instead of asking the
  model again, and each of its calls is reconciled by effect class (read_only: run again;
  idempotent: run again with the same key; side_effect: the ledger's result, or the probe's
  answer, or an UNKNOWN OUTCOME result the model must verify). Nothing is re-run blindly.
"""

from __future__ import annotations

import asyncio
import copy
import json
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from agents import Agent, FunctionTool, Handoff, Runner, RunResult, RunResultStreaming, Usage
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import SessionABC, SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit
from agents.models.interface import Model
from agents.tool_context import ToolContext
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseOutputItem,
    ResponseOutputItemDoneEvent,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import TypeAdapter

from ..codec import canonical_hash
from ..errors import ConfigError, TaskMismatch
from ..ledger import EffectLedger
from ..state import EFFECTS, Effect, JSONValue, ToolCall, idempotency_key, occurrence_key
from ..stores.base import Store
from ..stores.offload import off_loop
from ..tools import Probe
from . import _effects
from ._runlog import RunLog, log_id

LOG_PREFIX = "oai-session."
current_call = _effects.current_call


_OUTPUT_ITEMS: TypeAdapter[ResponseOutputItem] = TypeAdapter(ResponseOutputItem)


def _plain(value: Any) -> JSONValue:
    """An SDK item (a dict, possibly holding pydantic models) as plain JSON; anything else
    raises ``TypeError`` (as ``json.dumps`` and the SDK's own sessions do), storing nothing."""
    return json.loads(json.dumps(value, default=_model_json))


def _model_json(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if dump is None:
        raise TypeError(
            f"a session item holds a {type(value).__name__}, which is not JSON: "
            "pass plain JSON values or pydantic models"
        )
    return dump(mode="json", exclude_unset=True)


class UnbrokenSession(SessionABC):
    """Conversation history of the Agents SDK kept in an unbroken store. ``add_items`` is one
    atomic append, durable when it returns; ``pop_item`` and ``clear_session`` rewrite or
    delete atomically. One instance per session id per process.

    ``session_settings`` behaves as in the SDK's own sessions: ``None`` means
    ``SessionSettings()``, a dict is turned into ``SessionSettings`` (an unknown field is an
    error), and ``get_items()`` without a ``limit`` uses ``session_settings.limit``.
    ``close()`` ends this handle (the store is the caller's and stays open)."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        self.store = store
        self.log = RunLog(store, log_id(LOG_PREFIX, session_id), kind="openai-agents-session")
        self._closed = False

    @property
    def run_id(self) -> str:
        """The unbroken run id holding this session (the effect ledger is keyed by it)."""
        return self.log.run_id

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"UnbrokenSession {self.session_id!r} is closed; open a new one to use this session")

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; the newest ``limit`` of them when ``limit`` (or,
        when it is None, ``session_settings.limit``) is set."""
        self._check_open()
        items: list[Any] = copy.deepcopy(self.log.items())
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None:
            items = items[-wanted:] if wanted > 0 else []
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self._check_open()
        if items:
            plain = [_plain(item) for item in items]
            await off_loop(self.store, self.log.append, plain)  # the store blocks; the event loop must not

    async def pop_item(self) -> TResponseInputItem | None:
        self._check_open()
        return await off_loop(self.store, self._pop)

    def _pop(self) -> TResponseInputItem | None:
        items = self.log.items()
        if not items:
            return None
        last = copy.deepcopy(items[-1])
        self.log.rewrite(items[:-1], dict(self.log.head()))
        return last  # type: ignore[no-any-return]

    async def clear_session(self) -> None:
        self._check_open()
        await off_loop(self.store, self.log.delete)

    def close(self) -> None:
        """End this handle: later calls raise ``ConfigError``. Safe to call twice. What was
        added stays in the store (which the caller opened and closes)."""
        self._closed = True

    def _set_head(self, **changes: JSONValue) -> None:
        head = {**self.log.head(), **changes}
        self.log.append(head=head)


def _settings(value: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    """The SDK's rule for a session's settings: None is the defaults, a dict is validated
    (an unknown field raises) and turned into ``SessionSettings``."""
    return SessionSettings() if value is None else coerce_session_settings(value)


# --------------------------------------------------------------------------- the model


class DurableModel(Model):
    """Wraps a model so that its answer is saved in the session before any tool call in it
    runs, and a resumed run gets that saved answer back for the same request."""

    def __init__(self, inner: Model, session: UnbrokenSession) -> None:
        self.inner = inner
        self.session = session

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any) -> Any:
        request = _request_hash(system_instructions, input)
        saved = self._saved(request)
        if saved is not None:
            return saved
        response: ModelResponse = await self.inner.get_response(system_instructions, input, *args, **kwargs)
        self._save(request, response)
        return response

    async def stream_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The inner model's events, passed on as they come; the answer is saved when its
        ``response.completed`` event arrives, before that event is passed on (the runner
        starts the answer's tool calls only after it). A resumed request gets its saved
        answer back as one ``response.completed`` event (no deltas: it was streamed before)."""
        request = _request_hash(system_instructions, input)
        saved = self._saved(request)
        if saved is not None:
            yield _completed_event(saved)
            return
        done_items: list[Any] = []
        async for event in self.inner.stream_response(system_instructions, input, *args, **kwargs):
            if isinstance(event, ResponseOutputItemDoneEvent):
                done_items.append(event.item)
            elif isinstance(event, ResponseCompletedEvent):
                self._save(request, _response_of(event.response, done_items))
            yield event

    def _saved(self, request: str) -> ModelResponse | None:
        saved = self.session.log.head().get("model_answer")
        if isinstance(saved, dict) and saved.get("request") == request:
            return _response_from_json(saved["response"])
        return None

    def _save(self, request: str, response: ModelResponse) -> None:
        """Save the answer (durable when it returns), numbered for its calls' keys."""
        number = self.session.log.head().get("answers", 0)
        number = (number if isinstance(number, int) else 0) + 1
        answer = {"request": request, "response": _response_to_json(response), "number": number}
        self.session._set_head(model_answer=answer, answers=number)


def _request_hash(system_instructions: str | None, input: Any) -> str:
    return canonical_hash({"system": system_instructions, "input": _plain(input)})


def _response_of(response: Response, done_items: list[Any]) -> ModelResponse:
    """A streamed answer as the runner reads it (some backends leave the completed event's
    output empty and send the items in ``output_item.done`` events only)."""
    usage = response.usage
    return ModelResponse(
        output=list(response.output) or list(done_items),
        usage=Usage(
            requests=1,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            total_tokens=usage.total_tokens if usage else 0,
        ),
        response_id=response.id,
    )


def _completed_event(saved: ModelResponse) -> ResponseCompletedEvent:
    usage = saved.usage
    response = Response(
        id=saved.response_id or "unbroken-replayed",
        created_at=0,
        model="unbroken-replayed",
        object="response",
        output=saved.output,
        tool_choice="auto",
        tools=[],
        parallel_tool_calls=False,
        status="completed",
        usage=ResponseUsage(
            input_tokens=usage.input_tokens,
            input_tokens_details=InputTokensDetails(cache_write_tokens=0, cached_tokens=0),
            output_tokens=usage.output_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            total_tokens=usage.total_tokens,
        ),
    )
    return ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


def _response_to_json(response: ModelResponse) -> dict[str, JSONValue]:
    usage = response.usage
    return {
        "output": [item.model_dump(mode="json") for item in response.output],
        "usage": {
            "requests": usage.requests,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
        },
        "response_id": response.response_id,
    }


def _response_from_json(data: dict[str, Any]) -> ModelResponse:
    output = [_OUTPUT_ITEMS.validate_python(item) for item in data["output"]]
    return ModelResponse(output=output, usage=Usage(**data["usage"]), response_id=data.get("response_id"))


# --------------------------------------------------------------------------- the tools

Invoke = Callable[[ToolContext[Any], str], Awaitable[Any]]


def _durable_invoke(
    original: Invoke, name: str, effect: Effect, probe: Probe | None, session: UnbrokenSession
) -> Invoke:
    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        call_id = ctx.tool_call_id
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError:
            parsed = None
        call = ToolCall(
            id=call_id,
            name=name,
            input=parsed if isinstance(parsed, dict) else {"arguments": arguments},
            idempotency_key=call_key(session, call_id, name, arguments),
        )
        token = _effects.CURRENT_CALL.set(call)
        try:
            return await _settle(original, ctx, arguments, call, effect, probe, session)
        finally:
            _effects.CURRENT_CALL.reset(token)

    return invoke


def call_key(session: UnbrokenSession, call_id: str, name: str, arguments: str) -> str:
    """The idempotency key of a call by its occurrence: the session's run, the number of the
    saved model answer that made it, its position among that answer's function calls, and the
    provider's id (which a server may reuse: ``call_0`` in every answer). The answer is saved
    before its tools run, so a resumed process derives the same key. An answer saved before
    answers were numbered keeps the key it was run with (run and provider id). With no saved
    answer at all, ``ConfigError``: a key from the provider's id alone could name an earlier
    call's entry, whose result the ledger would then hand back without running this one."""
    answer = session.log.head().get("model_answer")
    if not isinstance(answer, dict):
        raise ConfigError(
            f"tool call {call_id!r} ({name}) ran with no model answer saved for session {session.session_id!r}, "
            "so it has no durable key; nothing was run. Durable tools run only for the answers of their "
            "durable() agent's model: do not swap the model of a durable() agent (wrap the agent you run), "
            "and do not clear the session or finish another run on it while a call runs"
        )
    number = answer.get("number")
    if not isinstance(number, int):
        return idempotency_key(session.run_id, call_id)
    response = answer.get("response")
    output = response.get("output") if isinstance(response, dict) else None
    calls = [item for item in output if isinstance(item, dict)] if isinstance(output, list) else []
    for position, item in enumerate(calls):
        if (item.get("call_id"), item.get("name"), item.get("arguments")) == (call_id, name, arguments):
            return occurrence_key(session.run_id, number, position, call_id)
    raise ConfigError(
        f"tool call {call_id!r} ({name}) is not in the model answer saved for session {session.session_id!r}; "
        "durable tools run only for the answers of their durable() agent's model"
    )


async def _settle(
    original: Invoke,
    ctx: ToolContext[Any],
    arguments: str,
    call: ToolCall,
    effect: Effect,
    probe: Probe | None,
    session: UnbrokenSession,
) -> Any:
    """Reuse, probe, report or run the call, by what the ledger knows (see ``_effects``)."""
    ledger = EffectLedger(session.store, session.run_id)
    decided = _effects.before(ledger, call, effect, probe)
    if isinstance(decided, _effects.Answered):
        return decided.content
    try:
        value = await original(ctx, arguments)
    except BaseException:
        _effects.interrupted(ledger, decided)
        raise
    _effects.after(ledger, decided, call, value if isinstance(value, str) else _text_of(value))
    return value


def _text_of(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def durable(
    agent: Agent[Any],
    session: UnbrokenSession,
    *,
    effects: Mapping[str, Effect] | None = None,
    probes: Mapping[str, Probe] | None = None,
) -> Agent[Any]:
    """A copy of ``agent`` whose model answers are saved before their tool calls run and whose
    function tools go through the effect ledger; so are the agents it hands off to (each
    wrapped once, cycles included: pass the starting agent only). ``effects`` declares each
    tool's class by name, across those agents (undeclared: ``side_effect``, never re-run
    blindly); ``probes`` answers, for a side-effecting tool interrupted by a crash, whether it
    took effect. Every agent's model must be a ``Model`` instance (not a model name)."""
    effects = dict(effects or {})
    probes = dict(probes or {})
    agents = _reachable(agent)
    names = {t.name for each in agents for t in each.tools if isinstance(t, FunctionTool)}
    for option, keys in (("effects", effects), ("probes", probes)):
        unknown = sorted(set(keys) - names)
        if unknown:
            raise ConfigError(
                f"{option} names {', '.join(unknown)}, which are not function tools of {agent.name!r} "
                "or of the agents it hands off to"
            )
    for name, declared in effects.items():
        if declared not in EFFECTS:
            raise ConfigError(f"effects[{name!r}] must be one of {', '.join(EFFECTS)}, not {declared!r}")
        if name in probes and declared != "side_effect":
            raise ConfigError(f"tool {name!r} is {declared}; a probe only makes sense for a side_effect tool")
    wrapped: dict[int, Agent[Any]] = {}
    for each in agents:
        wrapped[id(each)] = _durable_agent(each, session, effects, probes)
    for each in agents:
        wrapped[id(each)].handoffs = [_durable_handoff(h, wrapped) for h in each.handoffs]
    return wrapped[id(agent)]


def _reachable(agent: Agent[Any]) -> list[Agent[Any]]:
    """``agent`` and every agent it can hand off to, directly or not, each once."""
    found: dict[int, Agent[Any]] = {}
    todo = [agent]
    while todo:
        current = todo.pop()
        if id(current) in found:
            continue
        found[id(current)] = current
        for target in current.handoffs:
            reference = target._agent_ref if isinstance(target, Handoff) else None
            target_agent = reference() if reference is not None else target
            if isinstance(target_agent, Agent):
                todo.append(target_agent)
    return list(found.values())


def _durable_agent(
    agent: Agent[Any], session: UnbrokenSession, effects: Mapping[str, Effect], probes: Mapping[str, Probe]
) -> Agent[Any]:
    if not isinstance(agent.model, Model):
        raise ConfigError(
            f"agent {agent.name!r}: durable() needs agent.model to be a Model instance (for example "
            "OpenAIResponsesModel('gpt-5', AsyncOpenAI())), not a model name"
        )
    tools: list[Any] = []
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            wrapped = copy.copy(tool)
            effect: Effect = effects.get(tool.name, "side_effect")
            wrapped.on_invoke_tool = _durable_invoke(
                tool.on_invoke_tool, tool.name, effect, probes.get(tool.name), session
            )
            tools.append(wrapped)
        else:
            tools.append(tool)
    return agent.clone(model=DurableModel(agent.model, session), tools=tools)


def _durable_handoff(target: Agent[Any] | Handoff[Any, Any], wrapped: dict[int, Agent[Any]]) -> Any:
    """A handoff to the durable twin of its target. A ``Handoff`` keeps its name, schema,
    filter and callback; the agent its callback returns is swapped for that agent's twin."""
    if isinstance(target, Agent):
        return wrapped[id(target)]
    original = target.on_invoke_handoff

    async def invoke(context: Any, arguments: str) -> Any:
        chosen = await original(context, arguments)
        twin = wrapped.get(id(chosen))
        if twin is None:
            raise ConfigError(
                f"handoff {target.tool_name!r} returned agent {chosen.name!r}, which durable() did not wrap; "
                "a handoff must return the agent it was made for"
            )
        return twin

    durable_handoff = copy.copy(target)
    durable_handoff.on_invoke_handoff = invoke
    reference = target._agent_ref() if target._agent_ref is not None else None
    if reference is not None:
        durable_handoff._agent_ref = weakref.ref(wrapped[id(reference)])
    return durable_handoff


def _start(session: UnbrokenSession, input: str | list[TResponseInputItem]) -> None:
    """Save ``input`` as the session's running input, or check that it is the one an earlier
    process died while running (then it is resumed, not added again)."""
    wanted = canonical_hash(_plain(input))
    running = session.log.head().get("running")
    if running is None:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [_plain(i) for i in input]
        session.log.append(items, {**session.log.head(), "running": wanted})
    elif running != wanted:
        raise TaskMismatch(
            f"session {session.session_id!r} is still running another input (a process died during it); "
            "resume it by passing that same input, or call clear_session() to drop it"
        )


def _finish(session: UnbrokenSession) -> None:
    session._set_head(running=None, model_answer=None)


async def run_durably(agent: Agent[Any], input: str | list[TResponseInputItem], *, session: UnbrokenSession,
                      **runner_options: Any) -> RunResult:  # fmt: skip
    """Run ``input`` on ``session`` with ``Runner.run``, or resume it when an earlier process
    died while running this same input. The input is saved with the session before the model
    is asked. A different input while one is unfinished raises ``TaskMismatch`` (finish or
    ``clear_session`` first). ``runner_options`` go to ``Runner.run`` (not ``session``)."""
    await off_loop(session.store, _start, session, input)
    result = await Runner.run(agent, [], session=session, **runner_options)
    await off_loop(session.store, _finish, session)
    return result


async def run_durably_streamed(agent: Agent[Any], input: str | list[TResponseInputItem], *,
                               session: UnbrokenSession, **runner_options: Any) -> RunResultStreaming:  # fmt: skip
    """``run_durably`` with ``Runner.run_streamed``: the model's events reach
    ``result.stream_events()`` as they come, and each answer is saved whole before its tool
    calls run. A resumed run replays a saved answer as one completed event. The input counts
    as finished when the run ends without an error (then another input may start)."""
    await off_loop(session.store, _start, session, input)
    result = Runner.run_streamed(agent, [], session=session, **runner_options)
    task = result.run_loop_task

    def finished(done: asyncio.Task[Any]) -> None:
        failed = done.cancelled() or done.exception() is not None or result._stored_exception is not None
        if not failed:
            _finish(session)  # one small append, in the loop: the next run must see it

    if task is not None:
        task.add_done_callback(finished)
    return result


__all__ = ["DurableModel", "UnbrokenSession", "current_call", "durable", "run_durably", "run_durably_streamed"]
