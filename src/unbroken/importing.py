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

An import is the store's own acceptance, all or nothing: the file is checked field by field
(every value plain JSON within the codec's depth and integer limits, counters from 0 to
2**53-1, every ``tool_use`` block with its own ``id``, ``name`` and ``input`` object, no two calls
left in doubt under one id, a schema version this importer reads), then the run it makes is
encoded and read back by the codec's reader (``accept_import``) before anything is written. A
refusal is one line naming the field by its JSON path; nothing is dropped, nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import clock
from .codec import EncodedSave, Encoder, StoredRecord, decode, ensure_json
from .errors import ConfigError, CorruptCheckpoint, IncompatibleSchema, NotJSONValue, StateError
from .leases import acquire, make_owner
from .ledger import args_hash
from .providers.anthropic_format import dangling_call_ids, text_of
from .state import JSONValue, LedgerEntry, RunState, ToolCall, check_run_id, occurrence_key
from .stores.base import Store
from .usage import token_count

TEXTBOOK_FIELDS = frozenset({"version", "task", "turns", "tokensUsed", "messages", "pendingToolUse"})
ARTICLE_FIELDS = frozenset({"run_id", "step_id", "phase", "messages", "business_state", "pending_action"})
FINISHED_PHASES = frozenset({"completed", "complete", "done", "finished", "run_terminal", "succeeded"})
TEXTBOOK_VERSIONS = range(1, 2)
"""The textbook checkpoint.json ``version``s this importer reads."""
ARTICLE_SCHEMA_VERSIONS = range(1, 4)
"""The practice article's record ``schema_version``s this importer reads."""


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or ``ConfigError`` saying why it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot import {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot import {path}: it is not UTF-8 text (a JSON checkpoint is)") from exc
    try:
        document = json.loads(text)  # (the stdlib keeps integers exact: ensure_json judges them by path)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"cannot import {path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    except RecursionError:
        raise ConfigError(f"cannot import {path}: nested deeper than a checkpoint can be") from None
    except ValueError:  # the stdlib refuses an integer of more than 4,300 digits
        raise ConfigError(
            f"cannot import {path}: it holds a number of more than 4,300 digits, which no checkpoint field can be"
        ) from None
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
    now = clock.wall()
    entries = tuple(
        LedgerEntry(run_id, call.idempotency_key, call.id, call.name, args_hash(call), "pending", 1, None, now, now)
        for call in pending
    )
    state.save_seq = 1
    encoded = accept_import(state, entries, where)
    if store.exists(run_id):
        raise ConfigError(f"run {run_id!r} already exists in {store.url}; import under another --run-id")
    lease = acquire(store, run_id, make_owner(), 30.0)
    try:
        store.append(encoded, expect_seq=0, fence=lease.fence)
    finally:
        store.release_lease(lease)
    return state


def accept_import(state: RunState, entries: tuple[LedgerEntry, ...], where: str) -> EncodedSave:
    """The save an import writes, once the store's own acceptance passed: the encoder's
    write-time check, then the codec's reader on the very record (checksum, shape, fields, fold),
    which must give the same state back. ``ConfigError`` (one line) otherwise; nothing written."""
    try:
        encoded = Encoder().encode(state, "imported", force_snapshot=True, ledger=entries)
        loaded = decode(state.run_id, [StoredRecord(1, encoded.body, encoded.checksum)], keep_records=False).state
    except (StateError, CorruptCheckpoint) as exc:
        raise ConfigError(f"cannot import {where}: the run it makes would not load ({exc})") from None
    if loaded.small_fields() != state.small_fields() or loaded.messages != state.messages:
        raise ConfigError(f"cannot import {where}: the run it makes does not read back as written")
    return encoded


def _check_document(document: dict[str, Any], where: str, shape: str) -> None:
    """Every field plain JSON within the codec's limits, and a version this importer reads."""
    for key, value in document.items():
        try:
            ensure_json(value, str(key))
        except NotJSONValue as exc:
            raise ConfigError(f"cannot import {where}: {exc.path}: {exc.why}") from None
        if not _encodable(value):
            raise ConfigError(f"cannot import {where}: {key} holds text that is not Unicode (a lone surrogate)")
    name, known = ("version", TEXTBOOK_VERSIONS) if shape == "textbook" else ("schema_version", ARTICLE_SCHEMA_VERSIONS)
    version = document.get(name, known[0])
    if type(version) is not int or version < 1:
        raise ConfigError(f"cannot import {where}: {name} is {version!r}, not a schema version (1, 2, ...)")
    if version > known[-1]:
        raise IncompatibleSchema(
            f"cannot import {where}: {name} {version} is newer than the {known[-1]} this importer reads; "
            "upgrade unbroken or write the checkpoint in an older version (nothing was written)"
        )


def _encodable(value: object) -> bool:
    """Whether every string in ``value`` is Unicode a UTF-8 record can hold (JSON's ``\\ud800``
    escapes parse to lone surrogates, which no record can store)."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def _check_blocks(messages: list[Any], where: str) -> None:
    """Every tool_use block a whole call (a non-empty string ``id`` and ``name``, an ``input``
    object), unique in its message; every tool_result names the call it answers."""
    for index, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        seen: dict[str, int] = {}
        for position, block in enumerate(content):
            path = f"messages[{index}].content[{position}]"
            if not isinstance(block, dict):
                raise ConfigError(f"cannot import {where}: {path} is a {type(block).__name__}, not a block (an object)")
            if block.get("type") == "tool_result" and not _text(block.get("tool_use_id")):
                raise ConfigError(f"cannot import {where}: {path}.tool_use_id must be the id of the call it answers")
            if block.get("type") != "tool_use":
                continue
            for key in ("id", "name"):
                if not _text(block.get(key)):
                    raise ConfigError(f"cannot import {where}: {path}.{key} must be a non-empty string")
            if not isinstance(block.get("input"), dict):
                kind = f"a {type(block['input']).__name__}" if "input" in block else "missing"
                raise ConfigError(f"cannot import {where}: {path}.input is {kind}, not an object (the arguments)")
            if block["id"] in seen:
                raise ConfigError(
                    f"cannot import {where}: {path}.id {block['id']!r} is also messages[{index}].content"
                    f"[{seen[block['id']]}].id; each call in a message needs its own id"
                )
            seen[block["id"]] = position


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


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
    _check_document(document, where, shape)
    messages = _messages(document["messages"], where)
    if shape == "textbook":
        task = document["task"]
        turns, tokens = document["turns"], document["tokensUsed"]
        business_state: Any = {}
        declared = _as_list(document["pendingToolUse"], where)
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
    counters = (("turns", turns), ("tokensUsed", tokens)) if shape == "textbook" else (("step_id", turns),)
    for name, value in counters:
        if type(value) is not int or token_count(value) is None:
            shown = f"an integer of {value.bit_length()} bits" if type(value) is int and value > 0 else repr(value)
            raise ConfigError(f"cannot import {where}: {name} is {shown}, not a count from 0 to 2**53-1")
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
    _check_blocks(value, where)
    return list(value)


def _first_user_text(messages: list[Any]) -> str:
    content = messages[0].get("content") if messages[0].get("role") == "user" else None
    return content if isinstance(content, str) else text_of(content) if isinstance(content, list) else ""


def _as_list(value: Any, where: str) -> list[dict[str, Any]]:
    """``pendingToolUse`` as a list of tool_use blocks (each checked; none dropped)."""
    if value is None:
        return []
    items, listed = (value, True) if isinstance(value, list) else ([value], False)
    for position, item in enumerate(items):
        path = f"pendingToolUse[{position}]" if listed else "pendingToolUse"
        if not isinstance(item, dict):
            raise ConfigError(f"cannot import {where}: {path} is a {type(item).__name__}, not a tool_use block")
        if not _text(item.get("id")) or not _text(item.get("name")) or not isinstance(item.get("input"), dict):
            raise ConfigError(f"cannot import {where}: {path} needs a non-empty string id and name and an input object")
    return [dict(item) for item in items]


def _action_block(action: Any, where: str) -> dict[str, Any]:
    """The article's ``pending_action`` as a tool_use-like block (keeps its idempotency key)."""
    if not isinstance(action, dict):
        raise ConfigError(f"cannot import {where}: pending_action is a {type(action).__name__}, not an object")
    name = action.get("tool", action.get("name"))
    arguments = action.get("args", action.get("input", action.get("arguments", {})))
    if not _text(name) or not isinstance(arguments, dict):
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
    not hold yet (appended as the assistant's tool_use message, as the model made them). Two calls
    in doubt under one id are refused: their results could not be told apart."""
    dangling = dangling_call_ids(messages)
    twice = sorted({call_id for call_id in dangling if dangling.count(call_id) > 1})
    if twice:
        raise ConfigError(
            f"cannot import {where}: call id {twice[0]!r} is left without a result more than once in messages; "
            "each call in doubt needs its own id"
        )
    blocks = {
        str(block.get("id")): block
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    }
    keys: dict[str, str] = {}
    missing: list[JSONValue] = []
    named: dict[str, int] = {}
    for position, item in enumerate(declared):
        call_id = item.get("id")
        if isinstance(call_id, str) and call_id in named:
            raise ConfigError(
                f"cannot import {where}: pendingToolUse[{position}].id {call_id!r} is also pendingToolUse"
                f"[{named[call_id]}].id; each pending call needs its own id"
            )
        if isinstance(call_id, str):
            named[call_id] = position
        if isinstance(call_id, str) and call_id in blocks:
            known = blocks[call_id]
            if (known.get("name"), known.get("input")) != (item.get("name"), item.get("input")):
                raise ConfigError(
                    f"cannot import {where}: pending call {call_id!r} names another tool or other arguments than "
                    "the tool_use block of that id in messages"
                )
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
