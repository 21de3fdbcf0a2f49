"""The workload writer: builds a long run in a store without the model loop.

It makes the same save points the runner makes for the workload's turns (A: the assistant
message and its pending call; B: the tool result; and, with compaction, a ``compacted`` save
point that moves the summary forward), encodes them with the real ``Encoder`` and appends them
through the store's own ``append``. It holds no message after it is written (the list keeps
its length, the encoder only reads the new tail), so a 1,000,000-turn run is built in constant
memory. Large runs are built once into ``benchmarks/.cache`` and reused.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import time
from pathlib import Path

import workload
from unbroken import open_store
from unbroken.codec import Encoder
from unbroken.model import add_usage
from unbroken.providers.scripted import ScriptedModel
from unbroken.session import HISTORY_CHECK_STEP
from unbroken.state import RunState, ToolCall, ToolResult, occurrence_key
from unbroken.stores import sqlite as sqlite_store
from unbroken.stores.base import Store

CACHE = Path(__file__).resolve().parent / ".cache"
WINDOW_TURNS = 20
"""With compaction, the recent window the model is sent: the last 20 turns (~48 KB)."""
COMPACT_EVERY = 20
"""With compaction, a ``compacted`` save point every 20 turns (the window then spans 20-40 turns)."""


def summary_text(turn: int) -> str:
    return f"Read {turn} tickets so far; categories and counts are in business_state. " * 8


def write_run(url: str, run_id: str, turns: int, *, compaction: bool = False, progress: bool = False) -> None:
    """Append ``turns`` turns of the workload to a new run ``run_id`` in the store at ``url``."""
    store = open_store(url)
    try:
        write_turns(store, run_id, turns, compaction=compaction, progress=progress)
    finally:
        store.close()


def write_turns(store: Store, run_id: str, turns: int, *, compaction: bool = False, progress: bool = False) -> int:
    """Replace run ``run_id`` in ``store`` by ``turns`` turns of the workload; returns the saves made."""
    model = ScriptedModel([])
    encoder = Encoder(50, messages_are_json=True)
    state = RunState(run_id=run_id, task=workload.TASK, messages=list(model.start_messages(workload.TASK)))
    written = 0

    def save(label: str, force: bool = False) -> None:
        nonlocal written
        state.save_seq += 1
        state.updated_at = time.time()
        encoded = encoder.encode(state, label, force_snapshot=force)
        store.append(encoded, expect_seq=state.save_seq - 1)
        encoder.committed(state, encoded)
        messages = state.messages
        for index in range(written, len(messages)):
            messages[index] = None  # written once; only the count matters from now on
        written = len(messages)

    store.delete_run(run_id)
    save("start", force=True)
    started = time.monotonic()
    for turn in range(turns):
        # The runner checks the history for unanswered calls before each model request and
        # keeps how far in the state (``RunSession._checked``); so does the writer.
        if len(state.messages) - state.history_checked >= HISTORY_CHECK_STEP:
            state.history_checked = len(state.messages)
        usage = workload.usage(turn)
        state.turns += 1
        state.tokens_used += sum(usage.values())
        state.usage = add_usage(state.usage, usage)
        state.messages.append(workload.assistant_message(turn))
        call_id = workload.call_id(turn)
        key = occurrence_key(run_id, state.save_seq + 1, 0, call_id)  # as the engine keys it (save A, position 0)
        call = ToolCall(call_id, workload.TOOL_NAME, workload.tool_input(turn), key)
        state.pending_calls, state.results, state.resolutions = [call], {}, {}
        state.phase = "running_tools"
        save("model_turn")
        result = ToolResult(call_id, workload.tool_result_text(turn))
        state.messages.extend(model.tool_result_messages([call], [result]))
        state.pending_calls, state.results = [], {}
        state.phase = "awaiting_model"
        save("tools_done")
        if compaction and (turn + 1) % COMPACT_EVERY == 0 and turn + 1 > WINDOW_TURNS:
            state.summary = summary_text(turn + 1)
            state.summary_upto = len(state.messages) - 2 * WINDOW_TURNS
            save("compacted")
        if progress and (turn + 1) % 50_000 == 0:
            rate = (turn + 1) / (time.monotonic() - started)
            print(f"  ... built {turn + 1:,} of {turns:,} turns ({rate:,.0f} turns/s)", flush=True)
    return state.save_seq


def _format_key() -> str:
    """Changes whenever the bytes the writer produces would change (codec or workload edits), or
    the SQLite store's layout."""
    probe = CACHE / "probe.db"
    CACHE.mkdir(exist_ok=True)
    probe.unlink(missing_ok=True)
    write_run(f"sqlite:///{probe}?durability=normal", "probe", 3, compaction=True)
    store = open_store(f"sqlite:///{probe}")
    try:
        records = store.read_records("probe")
    finally:
        store.close()
    digest = hashlib.sha256()
    digest.update(f"store schema {sqlite_store.STORE_SCHEMA}".encode())  # the layout too (schema 4: segments)
    for record in records:
        body = record.body if isinstance(record.body, bytes) else record.body.encode()
        # updated_at/created_at differ between builds; hash the body with numbers blanked out.
        digest.update(bytes(ch for ch in body if not 48 <= ch <= 57))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{probe}{suffix}").unlink(missing_ok=True)
    return digest.hexdigest()[:12]


def cached_sqlite_run(turns: int, *, compaction: bool, say: object = print) -> tuple[Path, str]:
    """A SQLite file holding run ``scale-<turns>`` (built once, reused while the format is the same).
    Returns (path, run_id)."""
    run_id = f"scale-{turns}"
    name = f"{run_id}-{'compacted' if compaction else 'plain'}-{_format_key()}.db"
    path = CACHE / name
    if path.exists():
        return path, run_id
    for old in CACHE.glob(f"{run_id}-{'compacted' if compaction else 'plain'}-*.db*"):
        old.unlink()
    building = CACHE / f"{name}.building"
    building.unlink(missing_ok=True)
    if callable(say):
        say(f"building a {turns:,}-turn run into {path} (once; reused while the format is unchanged)")
    started = time.monotonic()
    url = f"sqlite:///{building}?durability=normal"
    write_run(url, run_id, turns, compaction=compaction, progress=turns >= 100_000)
    conn = sqlite3.connect(building)  # fold the WAL into the file before it is renamed
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{building}{suffix}").unlink(missing_ok=True)
    shutil.move(building, path)
    if callable(say):
        say(f"built {turns:,} turns in {time.monotonic() - started:.0f} s")
    return path, run_id
