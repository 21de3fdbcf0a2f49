"""``import_run``: a checkpoint file written by a hand-rolled harness, turned into an unbroken run.

Two shapes are read (JSON only, nothing executed):

* the textbook's ``checkpoint.json``: ``version``, ``task``, ``turns``, ``tokensUsed``,
  ``messages`` (Anthropic Messages shape) and ``pendingToolUse`` (the tool_use block, or a
  list of them, that was saved before it ran; null when none);
* the practice article's record: ``run_id``, ``step_id``, ``phase``, ``messages``,
  ``business_state``, ``pending_action`` (``tool``/``name``, ``args``/``input``, its
  ``idempotency_key``, optionally the call ``id``) and ``schema_version``.

A call that was pending when the file was written may or may not have run, so each becomes a
pending call with a ``pending`` effect-ledger entry (intent recorded, outcome not). Resuming
the run then applies the normal reconcile: a read-only tool is run again, an idempotent one
again with the same key, a side effect is asked to its probe and otherwise reported to the
model as an unknown outcome. Turns and tokens carry on from the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import clock
from .codec import Encoder, ensure_json
from .errors import ConfigError, NotJSONValue
from .leases import acquire, make_owner
from .ledger import args_hash
from .providers.anthropic_format import dangling_call_ids, text_of
from .state import JSONValue, LedgerEntry, RunState, ToolCall, check_run_id, occurrence_key
from .stores.base import Store

TEXTBOOK_FIELDS = frozenset({"version", "task", "turns", "tokensUsed", "messages", "pendingToolUse"})
ARTICLE_FIELDS = frozenset({"run_id", "step_id", "phase", "messages", "business_state", "pending_action"})
FINISHED_PHASES = frozenset({"completed", "complete", "done", "finished", "run_terminal", "succeeded"})


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or ``ConfigError`` saying why it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot import {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot import {path}: it is not UTF-8 text (a JSON checkpoint is)") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"cannot import {path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"cannot import {path}: the file holds a JSON {type(document).__name__}, not an object")
    return document


def import_run(store: Store, source: Path | Mapping[str, Any], run_id: str | None = None) -> RunState:
    """Create run ``run_id`` (default: the file's own ``run_id``) in ``store`` from a checkpoint
    (a path or the parsed object). Durable when it returns; refuses (``ConfigError``) a file it
    cannot read and a run id that already exists, writing nothing."""
    where = str(source) if isinstance(source, Path) else "the checkpoint"
    document = read_checkpoint(source) if isinstance(source, Path) else dict(source)
    given = run_id if run_id is not None else document.get("run_id")
    if not isinstance(given, str):
        raise ConfigError(f"cannot import {where}: give the new run's id (--run-id ID)")
    run_id = check_run_id(given)
    state, pending = _to_state(document, run_id, where)
    if store.exists(run_id):
        raise ConfigError(f"run {run_id!r} already exists in {store.url}; import under another --run-id")
    lease = acquire(store, run_id, make_owner(), 30.0)
    try:
        now = clock.wall()
        entries = tuple(
            LedgerEntry(run_id, call.idempotency_key, call.id, call.name, args_hash(call), "pending", 1, None, now, now)
            for call in pending
        )
        state.save_seq = 1
        encoded = Encoder().encode(state, "imported", force_snapshot=True, ledger=entries)
        store.append(encoded, expect_seq=0, fence=lease.fence)
    finally:
        store.release_lease(lease)
    return state


def _to_state(document: dict[str, Any], run_id: str, where: str) -> tuple[RunState, list[ToolCall]]:
    keys = set(document)
    if keys >= TEXTBOOK_FIELDS:
        shape = "textbook"
    elif keys >= ARTICLE_FIELDS:
        shape = "article"
    else:
        textbook, article = sorted(TEXTBOOK_FIELDS - keys), sorted(ARTICLE_FIELDS - keys)
        raise ConfigError(
            f"cannot import {where}: it is neither a textbook checkpoint.json (missing {', '.join(textbook)}) "
            f"nor a practice-article checkpoint (missing {', '.join(article)})"
        )
    messages = _messages(document["messages"], where)
    if shape == "textbook":
        task = document["task"]
        turns, tokens = document["turns"], document["tokensUsed"]
        business_state: Any = {}
        declared = _as_list(document["pendingToolUse"])
        phase_hint = ""
    else:
        task = _first_user_text(messages)
        turns, tokens = document["step_id"], 0
        business_state = document["business_state"] or {}
        action = document["pending_action"]
        declared = [] if action is None else [_action_block(action, where)]
        phase_hint = str(document["phase"]).lower()
    if not isinstance(task, str) or not task:
        raise ConfigError(f"cannot import {where}: no task (a non-empty string) could be read from it")
    for name, value in (("turns", turns), ("tokens", tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"cannot import {where}: {name} is {value!r}, not a count")
    if not isinstance(business_state, dict):
        raise ConfigError(f"cannot import {where}: business_state is a {type(business_state).__name__}, not an object")
    pending = _pending_calls(messages, declared, run_id, where)
    try:
        ensure_json(business_state, "business_state")
    except NotJSONValue as exc:
        raise ConfigError(f"cannot import {where}: {exc}") from exc
    state = RunState(
        run_id=run_id,
        task=task,
        provider="anthropic",
        turns=turns,
        tokens_used=tokens,
        messages=messages,
        business_state=business_state,
        pending_calls=pending,
        phase="running_tools" if pending else "awaiting_model",
    )
    if not pending and phase_hint in FINISHED_PHASES and messages and messages[-1].get("role") == "assistant":
        state.phase = "completed"
        content = messages[-1].get("content")
        state.output = content if isinstance(content, str) else text_of(content if isinstance(content, list) else [])
    return state, pending


def _messages(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"cannot import {where}: messages must be a non-empty list (Anthropic Messages shape)")
    for index, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise ConfigError(
                f"cannot import {where}: messages[{index}] is not a user or assistant message "
                "({'role': ..., 'content': ...}, Anthropic Messages shape)"
            )
        if not isinstance(message.get("content"), (str, list)):
            raise ConfigError(f"cannot import {where}: messages[{index}].content must be a string or a list of blocks")
    try:
        ensure_json(value, "messages")
    except NotJSONValue as exc:
        raise ConfigError(f"cannot import {where}: {exc}") from exc
    return list(value)


def _first_user_text(messages: list[Any]) -> str:
    content = messages[0].get("content") if messages[0].get("role") == "user" else None
    return content if isinstance(content, str) else text_of(content) if isinstance(content, list) else ""


def _as_list(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [dict(item) for item in items if isinstance(item, dict)]


def _action_block(action: Any, where: str) -> dict[str, Any]:
    """The article's ``pending_action`` as a tool_use-like block (keeps its idempotency key)."""
    if not isinstance(action, dict):
        raise ConfigError(f"cannot import {where}: pending_action is a {type(action).__name__}, not an object")
    name = action.get("tool", action.get("name"))
    arguments = action.get("args", action.get("input", action.get("arguments", {})))
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise ConfigError(f"cannot import {where}: pending_action needs a tool name and its arguments (an object)")
    block = {"type": "tool_use", "name": name, "input": arguments}
    call_id = action.get("id", action.get("call_id", action.get("tool_use_id")))
    if isinstance(call_id, str):
        block["id"] = call_id
    if isinstance(action.get("idempotency_key"), str):
        block["idempotency_key"] = action["idempotency_key"]
    return block


def _pending_calls(messages: list[Any], declared: list[dict[str, Any]], run_id: str, where: str) -> list[ToolCall]:
    """Every tool_use the history leaves unanswered, plus declared pending calls the history does
    not hold yet (appended as the assistant's tool_use message, as the model made them)."""
    dangling = dangling_call_ids(messages)
    blocks = {
        str(block.get("id")): block
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    }
    keys: dict[str, str] = {}
    missing: list[JSONValue] = []
    for position, item in enumerate(declared):
        call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:  # the article may omit it: match by tool and arguments
            wanted = (item.get("name"), item.get("input"))
            same = [i for i in dangling if (blocks[i].get("name"), blocks[i].get("input")) == wanted]
            call_id = same[0] if same else f"imported_{position + 1}"
        if isinstance(item.get("idempotency_key"), str):
            keys[call_id] = item["idempotency_key"]
        if call_id not in blocks:
            if not isinstance(item.get("name"), str) or not isinstance(item.get("input"), dict):
                raise ConfigError(f"cannot import {where}: pending tool call {call_id!r} has no name or input object")
            missing.append({"type": "tool_use", "id": call_id, "name": item["name"], "input": item["input"]})
            blocks[call_id] = {"name": item["name"], "input": item["input"]}
            dangling.append(call_id)
    if missing:
        messages.append({"role": "assistant", "content": missing})
    calls = []
    for position, call_id in enumerate(dangling):
        block = blocks[call_id]
        arguments = block.get("input")
        key = keys.get(call_id) or occurrence_key(run_id, 1, position, call_id)
        calls.append(
            ToolCall(call_id, str(block.get("name")), dict(arguments) if isinstance(arguments, dict) else {}, key)
        )
    return calls


__all__ = ["import_run", "read_checkpoint"]
