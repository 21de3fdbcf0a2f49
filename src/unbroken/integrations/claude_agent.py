"""The Claude Agent SDK: its session transcripts kept in an unbroken store.

``UnbrokenSessionStore(store)`` is the SDK's ``SessionStore`` (``ClaudeAgentOptions(session_store=...)``)
on any unbroken store: memory, SQLite, the file store, PostgreSQL, Redis, S3. Each transcript
(a session's main one, and each subagent's under its ``subpath``) is one append-only log
(``_runlog.RunLog``, an unbroken run): an ``append`` is one atomic save, durable when it
returns; an entry whose ``uuid`` the transcript already holds is not added again (the SDK
retries a batch whose reply was lost); ``load`` sees what other processes appended.

The SDK's own ``claude_agent_sdk.testing.run_session_store_conformance`` passes on every store
(tests/integration/frameworks/test_claude_agent_store.py). ``list_session_summaries`` is not
implemented: the SDK then builds listings from ``list_sessions`` and ``load``.

``durable_tools(tools, store)`` runs in-process SDK tools (``@tool``) through the effect ledger
(``_effects``): it gives the ``mcp_servers`` entry and the ``hooks`` to pass to
``ClaudeAgentOptions``. The handler receives only the arguments, so the ``PreToolUse`` hook
announces each call (session, ``tool_use`` id) and the handler takes the call announced with
its tool and canonical arguments, first in first out. Each call is keyed by ``call_key``; a
call asked again after a crash (same id, or a new id for a side effect left in doubt:
``DurableTools.retried_call``) is answered from the ledger, its probe, or UNKNOWN OUTCOME.

Run ids: ``claude.<project hash>.<session id>[.<subpath>]``, each part escaped reversibly
into run-id characters (``_xx`` per other byte), so listings need no extra reads; a part too
long for a run id is replaced by its hash and the log remembers the original in its head.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..codec import canonical_hash
from ..errors import ConfigError
from ..ledger import EffectLedger, args_hash
from ..state import EFFECTS, MAX_RUN_ID_LENGTH, Effect, JSONValue, RunState, ToolCall, occurrence_key
from ..stores.base import Store
from ..stores.offload import off_loop
from ..tools import Probe
from . import _effects
from ._effects import CURRENT_CALL, current_call
from ._runlog import RunLog, list_logs

if TYPE_CHECKING:  # the SDK's types only: the SDK is imported when durable tools are built
    from claude_agent_sdk import HookMatcher, SdkMcpTool
    from claude_agent_sdk.types import (
        HookEvent,
        McpServerConfig,
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
    )

PREFIX = "claude."
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_PART_LIMIT = 80


def _escape(text: str) -> str:
    """``text`` in run-id characters, reversibly: letters, digits and ``-`` as they are,
    every other UTF-8 byte as ``_xx``."""
    out: list[str] = []
    for ch in text:
        if ch in _PLAIN:
            out.append(ch)
        else:
            out.extend(f"_{byte:02x}" for byte in ch.encode("utf-8"))
    return "".join(out)


def _unescape(part: str) -> str | None:
    """The text ``_escape`` made ``part`` from; None for a hashed part (``_h...``)."""
    if part.startswith("_h"):
        return None
    raw = bytearray()
    index = 0
    while index < len(part):
        if part[index] == "_":
            raw.append(int(part[index + 1 : index + 3], 16))
            index += 3
        else:
            raw.extend(part[index].encode())
            index += 1
    return raw.decode("utf-8")


def _part(text: str) -> str:
    escaped = _escape(text)
    if escaped and len(escaped) <= _PART_LIMIT:
        return escaped
    return "_h" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]  # "_h" is never an escape


def _project(project_key: str) -> str:
    return hashlib.sha256(project_key.encode("utf-8")).hexdigest()[:16]


def _session_prefix(project_key: str, session_id: str) -> str:
    return f"{PREFIX}{_project(project_key)}.{_part(session_id)}"


def transcript_run_id(key: Mapping[str, Any]) -> str:
    """The run id of the transcript named by a ``SessionKey``."""
    run_id = _session_prefix(str(key["project_key"]), str(key["session_id"]))
    subpath = key.get("subpath")
    if subpath is not None:
        if not isinstance(subpath, str) or not subpath:
            raise ValueError("SessionKey subpath must be a non-empty string (omit it for the main transcript)")
        run_id += f".{_part(subpath)}"
    assert len(run_id) <= MAX_RUN_ID_LENGTH
    return run_id


class UnbrokenSessionStore:
    """The Claude Agent SDK's ``SessionStore`` on an unbroken ``Store`` (see the module docstring).

    Safe to share between the tasks and threads of one process; the store's calls run in a
    worker thread, so the event loop never waits on a disk or a network."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._logs: dict[str, RunLog] = {}
        self._lock = threading.Lock()

    def _log(self, run_id: str) -> RunLog:
        with self._lock:
            log = self._logs.get(run_id)
            if log is None:
                log = self._logs[run_id] = RunLog(self.store, run_id, kind="claude-agent-transcript")
            return log

    # ------------------------------------------------------------------ required

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Add ``entries`` to the transcript in one atomic, durable save; entries whose ``uuid``
        the transcript already holds are skipped."""
        if entries:
            plain = [cast("JSONValue", copy.deepcopy(dict(entry))) for entry in entries]
            await off_loop(self.store, self._append, dict(key), plain)

    def _append(self, key: dict[str, Any], entries: list[JSONValue]) -> None:
        log = self._log(transcript_run_id(key))
        log.refresh_if_changed()

        def change(state: RunState) -> tuple[list[JSONValue], dict[str, JSONValue] | None]:
            seen = {item.get("uuid") for item in state.messages if isinstance(item, dict)}
            seen.discard(None)
            fresh: list[JSONValue] = []
            for entry in entries:
                uuid = entry.get("uuid") if isinstance(entry, dict) else None
                if uuid is not None:
                    if uuid in seen:
                        continue
                    seen.add(uuid)
                fresh.append(entry)
            head = None if state.save_seq else {name: value for name, value in key.items() if value is not None}
            return fresh, head

        log.update(change)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every entry of the transcript in append order, or None if it was never written."""
        return await off_loop(self.store, self._load, dict(key))

    def _load(self, key: dict[str, Any]) -> list[SessionStoreEntry] | None:
        log = self._log(transcript_run_id(key))
        log.refresh()
        if not log.exists():
            return None
        return cast("list[SessionStoreEntry]", copy.deepcopy(log.items()))

    # ------------------------------------------------------------------ optional

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The sessions of ``project_key`` (main transcripts only) with their last-modified time
        in epoch milliseconds."""
        return await off_loop(self.store, self._list_sessions, project_key)

    def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        prefix = f"{PREFIX}{_project(project_key)}."
        found: list[SessionStoreListEntry] = []
        for summary in self.store.list_runs():
            rest = summary.run_id[len(prefix) :] if summary.run_id.startswith(prefix) else None
            if rest is None or "." in rest or summary.save_seq == 0:
                continue
            session_id = _unescape(rest)
            if session_id is None:
                session_id = str(self._log(summary.run_id).head().get("session_id"))
            found.append({"session_id": session_id, "mtime": int(summary.updated_at * 1000)})
        return found

    async def delete(self, key: SessionKey) -> None:
        """Remove a transcript; a main transcript takes its subagents' with it. Safe to call twice."""
        await off_loop(self.store, self._delete, dict(key))

    def _delete(self, key: dict[str, Any]) -> None:
        run_id = transcript_run_id(key)
        doomed = [run_id]
        if key.get("subpath") is None:
            doomed += list_logs(self.store, run_id + ".")
        for each in doomed:
            self._log(each).delete()

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths of the session's subagent transcripts."""
        return await off_loop(self.store, self._list_subkeys, dict(key))

    def _list_subkeys(self, key: dict[str, Any]) -> list[str]:
        prefix = _session_prefix(str(key["project_key"]), str(key["session_id"])) + "."
        subkeys: list[str] = []
        for run_id in list_logs(self.store, prefix):
            subpath = _unescape(run_id[len(prefix) :])
            if subpath is None:
                subpath = str(self._log(run_id).head().get("subpath"))
            subkeys.append(subpath)
        return subkeys


# ---------------------------------------------------------------------- tools through the ledger

TOOLS_PREFIX = "claude-tools."
_UNHOOKED = (
    "durable tool {name} was called without its PreToolUse hook, so its call is unknown and it was not run; "
    "pass hooks=durable.hooks (or merge them into your own) in ClaudeAgentOptions"
)


def tools_run_id(session_id: str) -> str:
    """The run that holds the effect ledger of a session's in-process tools."""
    return TOOLS_PREFIX + _part(session_id)


def call_key(session_id: str, tool_use_id: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """The idempotency key of one call: the session, the ``tool_use`` id and what the call does
    (tool and canonical arguments). Never the id alone: a local model reuses ``toolu_01`` for
    every call. A call made again with the same id and the same arguments (a model told that
    the earlier one was interrupted, retrying it) is the same call, so it is answered from the
    ledger (or its probe), never run a second time on a guess."""
    what = canonical_hash({"tool": tool, "input": cast("JSONValue", dict(arguments))})
    return occurrence_key(tools_run_id(session_id), 0, 0, f"{tool_use_id}\x00{what}")


class DurableTools:
    """In-process SDK tools (``@tool``) that run through unbroken's effect ledger; build it with
    ``durable_tools``. Pass ``mcp_servers=durable.mcp_servers`` and ``hooks=durable.hooks`` to
    ``ClaudeAgentOptions``: the ``PreToolUse`` hook tells the tools which call they are running
    (the handler receives only the arguments)."""

    def __init__(
        self,
        tools: Sequence[SdkMcpTool[Any]],
        store: Store,
        *,
        server: str,
        effects: Mapping[str, Effect],
        probes: Mapping[str, Probe],
    ) -> None:
        from claude_agent_sdk import HookMatcher, SdkMcpTool, create_sdk_mcp_server

        for tool_name, effect in effects.items():
            if effect not in EFFECTS:
                raise ConfigError(f"effect of tool {tool_name!r} must be one of {', '.join(EFFECTS)}, not {effect!r}")
        names = {each.name for each in tools}
        strangers = sorted((set(effects) | set(probes)) - names)
        if strangers:
            raise ConfigError(
                f"effects or probes name {', '.join(strangers)}, which are not among the tools "
                f"({', '.join(sorted(names))}); use the tools' own names (as given to @tool)"
            )
        self.store = store
        self.server = server
        self.effects = dict(effects)
        self.probes = dict(probes)
        # Calls announced by the hook and not yet taken by a handler, per (tool, canonical
        # arguments), first in first out: parallel calls of one tool are told apart by arguments.
        self._announced: dict[tuple[str, str], deque[tuple[str, str]]] = {}
        self._running: set[str] = set()  # keys of the calls this process is running now
        wrapped = [
            SdkMcpTool(each.name, each.description, each.input_schema, self._wrap(each), each.annotations)
            for each in tools
        ]
        self.tools = wrapped  # as the CLI calls them (through the ledger)
        self.mcp_servers: dict[str, McpServerConfig] = {server: create_sdk_mcp_server(server, tools=wrapped)}
        hook = HookMatcher(matcher=None, hooks=[cast("Any", self._announce)])
        self.hooks: dict[HookEvent, list[HookMatcher]] = {
            "PreToolUse": [hook],
            "PostToolUse": [hook],
            "PostToolUseFailure": [hook],
        }

    def _slot(self, tool: str, arguments: Mapping[str, Any]) -> tuple[str, str]:
        return tool, canonical_hash(cast("JSONValue", dict(arguments)))

    async def _announce(self, hook_input: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        """The hook: before a call of one of these tools, remember which call it is; after it,
        forget it if no handler took it (the call was denied or blocked), so that it is never
        taken for a later call with the same arguments."""
        prefix = f"mcp__{self.server}__"
        name = str(hook_input.get("tool_name", ""))
        if name.startswith(prefix):
            slot = self._slot(name[len(prefix) :], hook_input.get("tool_input") or {})
            call = (str(hook_input.get("session_id", "")), str(hook_input.get("tool_use_id") or tool_use_id or ""))
            waiting = self._announced.setdefault(slot, deque())
            if hook_input.get("hook_event_name") == "PreToolUse":
                waiting.append(call)
            elif call in waiting:
                waiting.remove(call)
            if not waiting:
                del self._announced[slot]
        return {}

    def _wrap(self, tool: SdkMcpTool[Any]) -> Callable[[Any], Awaitable[dict[str, Any]]]:
        async def handler(arguments: Any) -> dict[str, Any]:
            return await self.run_call(tool, dict(arguments))

        return handler

    def retried_call(self, ledger: EffectLedger, call: ToolCall) -> ToolCall:
        """``call``, or the earlier call of the session it retries: a side effect with the same
        tool and arguments whose outcome a crash left in doubt (no process here is running it).
        A model told that a call "may or may not have completed" retries it with a new
        ``tool_use`` id; run as a new call, it would be made twice. Asked again under the
        earlier key, it is answered by the probe, or UNKNOWN OUTCOME. The one place the tools
        recognise a retry under a new id; switched off, such a retry runs again."""
        if ledger.get(call.idempotency_key) is not None:
            return call
        what = args_hash(call)
        for entry in ledger.store.ledger_list(ledger.run_id):
            in_doubt = entry.status in ("pending", "unknown") and entry.key not in self._running
            if in_doubt and entry.tool == call.name and entry.args_hash == what:
                return call.replace(idempotency_key=entry.key)
        return call

    async def run_call(self, tool: SdkMcpTool[Any], arguments: dict[str, Any]) -> dict[str, Any]:
        """One call through the ledger (the one place the tools reconcile; switched off, a call
        made again after a crash runs again): a settled call is answered with its recorded
        result, an in-doubt side effect by its probe or UNKNOWN OUTCOME; otherwise the tool runs
        and its result is recorded (durable) before the CLI sees it."""
        waiting = self._announced.get(self._slot(tool.name, arguments))
        if not waiting:
            return _answer(_UNHOOKED.format(name=tool.name), is_error=True)
        session_id, use_id = waiting.popleft()
        arguments_json = cast("dict[str, JSONValue]", json.loads(json.dumps(arguments)))
        call = ToolCall(use_id, tool.name, arguments_json, call_key(session_id, use_id, tool.name, arguments))
        ledger = EffectLedger(self.store, tools_run_id(session_id))
        effect = self.effects.get(tool.name, "side_effect")
        if effect == "side_effect":
            call = await off_loop(self.store, self.retried_call, ledger, call)
        self._running.add(call.idempotency_key)  # before its claim: never taken for a crashed call
        try:
            return await self._through_ledger(tool, arguments, ledger, call, effect)
        finally:
            self._running.discard(call.idempotency_key)

    async def _through_ledger(
        self, tool: SdkMcpTool[Any], arguments: dict[str, Any], ledger: EffectLedger, call: ToolCall, effect: Effect
    ) -> dict[str, Any]:
        step = await off_loop(self.store, _effects.before, ledger, call, effect, self.probes.get(tool.name))
        if isinstance(step, _effects.Answered):
            return _recorded(step.content, step.is_error)
        token = CURRENT_CALL.set(call)
        try:
            result = await tool.handler(arguments)
        except Exception:
            await off_loop(self.store, _effects.interrupted, ledger, step)
            raise
        finally:
            CURRENT_CALL.reset(token)
        is_error = bool(result.get("is_error") or result.get("isError"))
        await off_loop(self.store, _effects.after, ledger, step, call, json.dumps(result, default=str), is_error)
        return result


def durable_tools(
    tools: Sequence[SdkMcpTool[Any]],
    store: Store,
    *,
    server: str = "tools",
    effects: Mapping[str, Effect] | None = None,
    probes: Mapping[str, Probe] | None = None,
) -> DurableTools:
    """Run in-process SDK tools (``@tool``) through the effect ledger in ``store``, keyed per call
    (``call_key``). ``effects`` gives each tool's class by name (undeclared tools are side
    effects: never run twice); ``probes`` a side effect's probe, asked when a crash left its
    outcome in doubt. Inside a tool, ``current_call().idempotency_key`` is the call's key."""
    return DurableTools(tools, store, server=server, effects=effects or {}, probes=probes or {})


def _answer(text: str, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "is_error": is_error}


def _recorded(content: str, is_error: bool) -> dict[str, Any]:
    """A recorded result as the tool returned it; a probe's or the ledger's text as a text result."""
    try:
        recorded = json.loads(content)
    except ValueError:
        recorded = None
    if isinstance(recorded, dict) and isinstance(recorded.get("content"), list):
        return recorded
    return _answer(content, is_error)


__all__ = [
    "DurableTools",
    "UnbrokenSessionStore",
    "call_key",
    "current_call",
    "durable_tools",
    "tools_run_id",
    "transcript_run_id",
]
