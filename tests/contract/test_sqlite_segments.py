"""SQLite segments (store schema 4): older records packed into one row each, read by the loader
in one parse (``segment_read``). What must hold, whatever happens to the file:

* the fast read gives exactly the state the careful, record-by-record read gives, and the state
  an unpacked store gives for the same saves;
* damage inside a segment is reported as the damaged record (``CorruptCheckpoint`` naming the
  last intact save point), and a damaged record is never packed (its damage is not sealed in);
* a pack is all or nothing: a process killed in the middle of one leaves every record readable;
* a reader in another process never sees a record missing while a writer packs;
* only the lease holder packs.

Each check is shown to fail when the mechanism it relies on is switched off.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unbroken import CorruptCheckpoint, segment_read
from unbroken.acceptance import RunRecords
from unbroken.codec import Encoder, Segment, decode
from unbroken.state import JSONValue, RunState, ToolCall, occurrence_key
from unbroken.stores import _sqlite_segments
from unbroken.stores.sqlite import SQLiteStore
from unbroken.testing.contract import RunWriter

SRC = Path(__file__).resolve().parents[2] / "src"


def packed_store(path: Path, keep_recent: int = 2, pack_batch: int = 4) -> SQLiteStore:
    return SQLiteStore(path, durability="normal", keep_recent=keep_recent, pack_batch=pack_batch, sealed_read_from=0)


def table_counts(path: Path) -> tuple[int, int]:
    """(loose rows, records in segments)."""
    with sqlite3.connect(path) as conn:
        loose = conn.execute("SELECT count(*) FROM unbroken_records").fetchone()[0]
        packed = conn.execute("SELECT coalesce(sum(last_seq - first_seq + 1), 0) FROM unbroken_segments").fetchone()[0]
    conn.close()
    return int(loose), int(packed)


class AgentLike:
    """Saves as the engine does, turn by turn: save A (the assistant message with a tool call,
    recorded as pending, with the engine's occurrence key) and save B (the tool result)."""

    def __init__(self, store: SQLiteStore, run_id: str, *, snapshot_every: int = 5) -> None:
        self.store = store
        self.state = RunState(run_id=run_id, task="read tickets", messages=[{"role": "user", "content": "go"}])
        self.encoder = Encoder(snapshot_every, messages_are_json=True)
        self.save("start", force=True)

    def save(self, label: str, *, force: bool = False) -> None:
        self.state.save_seq += 1
        encoded = self.encoder.encode(self.state, label, force_snapshot=force)
        self.store.append(encoded, expect_seq=self.state.save_seq - 1)
        self.encoder.committed(self.state, encoded)

    def model_turn(self, turn: int, payload: JSONValue = None) -> None:
        call_id = f"toolu_{turn}"
        arguments: dict[str, JSONValue] = {"ticket": turn, "payload": payload}
        self.state.messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f'turn {turn} \u00e9\u4e2d\U0001f600 "quoted" \\ back'},
                    {"type": "tool_use", "id": call_id, "name": "read_ticket", "input": arguments},
                ],
            }
        )
        self.state.turns += 1
        self.state.tokens_used += 100 + turn
        key = occurrence_key(self.state.run_id, self.state.save_seq + 1, 0, call_id)
        self.state.pending_calls = [ToolCall(call_id, "read_ticket", dict(arguments), key)]
        self.state.phase = "running_tools"
        self.save("model_turn")

    def tool_result(self, turn: int) -> None:
        self.state.messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": f"r{turn}"}],
            }
        )
        self.state.pending_calls = []
        self.state.phase = "awaiting_model"
        self.state.business_state["done"] = turn
        self.save("tools_done")


def play(store: SQLiteStore, run_id: str, turns: int, *, end_pending: bool = True) -> RunState:
    agent = AgentLike(store, run_id)
    for turn in range(turns):
        agent.model_turn(turn, payload=[turn, 1.5, None, True, {"k": "v" * (turn % 7)}, 2**63 - 1, -(2**63), 2**64 - 1])
        if turn < turns - 1 or not end_pending:
            agent.tool_result(turn)
    return agent.state


def same_state(a: RunState, b: RunState) -> bool:
    return dataclasses.asdict(a) == dataclasses.asdict(b)


def test_the_fast_read_equals_the_careful_read_and_an_unpacked_store(tmp_path: Path) -> None:
    packed = packed_store(tmp_path / "packed.db", keep_recent=3, pack_batch=7)
    plain = SQLiteStore(tmp_path / "plain.db", durability="normal", keep_recent=10**6)
    written = play(packed, "r", 60)
    play(plain, "r", 60)
    loose, in_segments = table_counts(tmp_path / "packed.db")
    assert in_segments >= 100 and loose + in_segments == written.save_seq  # most of the run is packed
    fast = packed.load("r")  # sealed, one msgspec parse a segment
    timeline = packed.decode("r", keep_records=True)  # for a timeline: record by record
    careful = decode("r", packed.read_raw_records("r"))  # record by record, every checksum
    assert same_state(fast, careful.state) and same_state(timeline.state, careful.state)
    assert fast.pending_calls == written.pending_calls  # expanded from "at" inside a packed record
    assert fast.messages == written.messages and fast.save_seq == written.save_seq
    other = plain.load("r")
    assert [fast.messages, fast.pending_calls, fast.business_state, fast.turns, fast.tokens_used] == [
        other.messages,
        other.pending_calls,
        other.business_state,
        other.turns,
        other.tokens_used,
    ]
    assert [info.seq for info in timeline.timeline] == list(range(1, written.save_seq + 1))
    assert timeline.timeline == careful.timeline
    packed.close()
    plain.close()


def test_the_fast_read_is_taken_for_sealed_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed claim has a mechanism: a resume of a packed run parses each segment once."""
    store = packed_store(tmp_path / "runs.db")
    play(store, "r", 30)
    calls: list[int] = []
    real = segment_read.records_of

    def counting(segment: Segment, first_seq: int | None, current: int, run: RunRecords) -> list[Any] | None:
        found = real(segment, first_seq, current, run)
        calls.append(0 if found is None else len(found))
        return found

    monkeypatch.setattr(segment_read, "records_of", counting)
    store.load("r")
    _, in_segments = table_counts(tmp_path / "runs.db")
    assert calls and all(calls) and sum(calls) == in_segments


def segment_rows(path: Path) -> list[tuple[int, int]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT first_seq, last_seq FROM unbroken_segments ORDER BY first_seq").fetchall()
    conn.close()
    return [(int(a), int(b)) for a, b in rows]


def flip_in_segment(path: Path, first: int, column: str, offset: int) -> None:
    with sqlite3.connect(path) as conn:
        (value,) = conn.execute(f"SELECT {column} FROM unbroken_segments WHERE first_seq=?", (first,)).fetchone()
        data = bytearray(value if isinstance(value, bytes) else value.encode())
        data[offset % len(data)] ^= 0x04
        changed: bytes | str = bytes(data) if isinstance(value, bytes) else bytes(data).decode("latin-1")
        conn.execute(f"UPDATE unbroken_segments SET {column}=? WHERE first_seq=?", (changed, first))
    conn.close()


def record_offset(path: Path, first: int, seq: int) -> int:
    """A byte offset inside the body of record ``seq`` of the segment starting at ``first``."""
    with sqlite3.connect(path) as conn:
        (idx,) = conn.execute("SELECT idx FROM unbroken_segments WHERE first_seq=?", (first,)).fetchone()
    conn.close()
    lengths: list[int] = json.loads(idx)["lengths"]
    return 1 + sum(length + 1 for length in lengths[: seq - first]) + lengths[seq - first] // 2


def test_a_flipped_bit_in_a_packed_record_is_reported_as_that_record(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = packed_store(path)
    play(store, "r", 40)
    first, _ = segment_rows(path)[3]
    victim = first + 1
    flip_in_segment(path, first, "bodies", record_offset(path, first, victim))
    with pytest.raises(CorruptCheckpoint, match=f"save record {victim} ") as caught:
        store.load("r")
    assert caught.value.last_good_seq == victim - 1
    shown = store.load("r", recover=True)  # the last intact save point, as for a loose record
    assert shown.save_seq == victim - 1


@pytest.mark.parametrize("sealed_read_from", [0, 10**9], ids=["msgspec", "orjson"])
@pytest.mark.parametrize("column", ["bodies", "idx"])
def test_no_flipped_bit_anywhere_in_a_segment_gives_a_wrong_state(
    tmp_path: Path, column: str, sealed_read_from: int
) -> None:
    """Every 7th byte of one segment's bodies or index, flipped in turn: the load gives the true
    state or raises CorruptCheckpoint, never anything else (through either sealed read)."""
    path = tmp_path / "runs.db"
    store = packed_store(path)
    truth = play(store, "r", 12)
    store.close()
    first, _ = segment_rows(path)[1]
    with sqlite3.connect(path) as conn:
        (size,) = conn.execute(f"SELECT length({column}) FROM unbroken_segments WHERE first_seq=?", (first,)).fetchone()
    conn.close()
    pristine = path.read_bytes()
    wrong = 0
    for offset in range(0, size, 7):
        path.write_bytes(pristine)
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        flip_in_segment(path, first, column, offset)
        reopened = packed_store(path)
        reopened.sealed_read_from = sealed_read_from
        try:
            state = reopened.load("r")
        except CorruptCheckpoint:
            continue
        finally:
            reopened.close()
        if state.messages != truth.messages or state.business_state != truth.business_state:
            wrong += 1
    assert wrong == 0


@pytest.mark.parametrize("sealed_read_from", [0, 10**9], ids=["msgspec", "orjson"])
def test_the_seal_is_what_catches_a_flip_the_sealed_read_would_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sealed_read_from: int
) -> None:
    """The check above can fail: with the seal check switched off, a flipped bit in a message of
    a packed record comes back as a silently different state (through either one-parse read:
    neither checks each record's own checksum)."""
    path = tmp_path / "runs.db"
    store = packed_store(path)
    store.sealed_read_from = sealed_read_from
    truth = play(store, "r", 12)
    first, _ = segment_rows(path)[1]
    with sqlite3.connect(path) as conn:
        (bodies,) = conn.execute("SELECT bodies FROM unbroken_segments WHERE first_seq=?", (first,)).fetchone()
    conn.close()
    offset = bytes(bodies).index(b"quoted")  # inside a message's text: still valid JSON when flipped
    flip_in_segment(path, first, "bodies", offset)
    with pytest.raises(CorruptCheckpoint):
        store.load("r")
    with sqlite3.connect(path) as conn:
        stored, index_text = conn.execute(
            "SELECT seal, idx FROM unbroken_segments WHERE first_seq=?", (first,)
        ).fetchone()
    conn.close()
    real = segment_read.seal

    def unchecked(index: bytes, data: bytes, seed: int = 0) -> str:
        # The mechanism mutated: that segment's seal is taken as holding, whatever its bytes.
        return str(stored) if index == bytes(index_text) else real(index, data, seed)

    monkeypatch.setattr(segment_read, "seal", unchecked)
    state = store.load("r")
    assert state.messages != truth.messages


def test_a_damaged_record_is_never_packed(tmp_path: Path) -> None:
    """A record damaged while loose stays loose, and so does everything after it, so its damage
    is reported as itself and is not sealed into a segment."""
    path = tmp_path / "runs.db"
    store = packed_store(path, keep_recent=2, pack_batch=4)
    agent = AgentLike(store, "r")
    for turn in range(2):
        agent.model_turn(turn)
        agent.tool_result(turn)
    with sqlite3.connect(path) as conn:  # damage save 3 by hand while it is loose
        changed = conn.execute("UPDATE unbroken_records SET body=replace(body, 'tools_done', 'tools_dune') WHERE seq=3")
        assert changed.rowcount == 1
    conn.close()
    for turn in range(2, 12):
        agent.model_turn(turn)
        agent.tool_result(turn)
    segments = segment_rows(path)
    assert all(last < 3 for _, last in segments)  # nothing at or after the damage was packed
    with pytest.raises(CorruptCheckpoint, match="save record 3 ") as caught:
        store.load("r")
    assert caught.value.last_good_seq == 2


def test_a_writer_that_lost_its_fence_does_not_pack(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = packed_store(path, keep_recent=2, pack_batch=4)
    writer = RunWriter(store, "r")
    lease = store.acquire_lease("r", "owner-1", 60.0)
    for step in range(1, 14):
        writer.turn(step, fence=lease.fence)
    before = table_counts(path)
    assert before[0] > 4  # records 9..13 are loose: a pack after save 14 would take 9..12
    store.backend._pack_after(14, "r", lease.fence + 1)  # a fence the store no longer has: nothing moves
    assert table_counts(path) == before
    store.backend._pack_after(14, "r", lease.fence)
    assert table_counts(path) == (before[0] - 4, before[1] + 4)


KILL_DURING_PACK = textwrap.dedent(
    """
    import sys
    from unbroken.stores.sqlite import SQLiteStore
    from unbroken.testing.contract import RunWriter

    store = SQLiteStore(sys.argv[1], keep_recent=2, pack_batch=4, sealed_read_from=0)
    writer = RunWriter(store, "r")
    for step in range(1, 40):
        writer.turn(step)
        print(step, flush=True)  # acknowledged: the save returned
    """
)


@pytest.mark.parametrize(
    "point", ["sqlite.pack.before:2", "sqlite.pack.segment_written:2", "sqlite.pack.segment_written:5"]
)
def test_a_process_killed_while_packing_loses_nothing(tmp_path: Path, point: str) -> None:
    path = tmp_path / "runs.db"
    env = {**os.environ, "PYTHONPATH": str(SRC), "UNBROKEN_CRASH_AT": point}
    done = subprocess.run(
        [sys.executable, "-c", KILL_DURING_PACK, str(path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -9, done.stderr  # SIGKILLed at the crash point
    acknowledged = int(done.stdout.split()[-1])
    store = packed_store(path)
    state = store.load("r")
    assert state.save_seq >= acknowledged  # (the killed save was durable before its pack began)
    assert len(state.messages) == state.save_seq and state.turns == state.save_seq
    assert store.decode("r", keep_records=True).state == state
    # The run goes on, and packing resumes.
    writer = RunWriter(store, "r")
    writer.state = state
    writer.encoder.prime(state)
    for step in range(state.save_seq + 1, state.save_seq + 20):
        writer.turn(step)
    assert store.load("r") == writer.state


READER = textwrap.dedent(
    """
    import sys, time
    from unbroken.stores.sqlite import SQLiteStore
    store = SQLiteStore(sys.argv[1], keep_recent=2, pack_batch=4, sealed_read_from=0)
    print("READY", flush=True)
    loads, seen, deadline = 0, 0, time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            state = store.load("r")
        except Exception as exc:
            if type(exc).__name__ == "RunNotFound":
                continue
            print("ERROR", type(exc).__name__, exc, flush=True)
            raise SystemExit(1)
        assert state.save_seq >= seen and len(state.messages) == state.save_seq
        seen, loads = state.save_seq, loads + 1
        if seen >= int(sys.argv[2]):
            break
    print("OK", loads, seen, flush=True)
    """
)


def test_a_reader_in_another_process_never_misses_a_record_while_the_writer_packs(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = packed_store(path)
    writer = RunWriter(store, "r")
    writer.turn(1)
    saves = 400
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path), str(saves)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdout.readline().strip() == "READY"
    for step in range(2, saves + 1):
        writer.turn(step)
        time.sleep(0.002)  # the reader loads many times while the run is packed under it
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, out + err
    assert out.startswith("OK") and int(out.split()[1]) > 20, out
    _, in_segments = table_counts(path)
    assert in_segments > saves // 2  # the reader ran while most of the run was being packed


def json_containers(children: st.SearchStrategy[JSONValue]) -> st.SearchStrategy[JSONValue]:
    return st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    json_containers,
    max_leaves=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(JSON, min_size=6, max_size=14))
def test_any_json_reads_the_same_through_a_segment(tmp_path: Path, payloads: list[JSONValue]) -> None:
    """msgspec (the fast read) and orjson (the careful read) give the same values for every
    JSON value the format allows."""
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "runs.db"  # a fresh store for each example
    store = packed_store(path, keep_recent=1, pack_batch=2)
    agent = AgentLike(store, "r")
    for turn, payload in enumerate(payloads):
        agent.model_turn(turn, payload)
        agent.tool_result(turn)
    fast = store.load("r")
    careful = store.decode("r", keep_records=True).state
    assert fast == careful
    assert fast.messages == agent.state.messages
    store.close()


def test_reads_over_segments_stay_bounded(tmp_path: Path) -> None:
    """records_between and snapshot_seq find segments by key range, never by scanning them."""
    path = tmp_path / "runs.db"
    store = packed_store(path)
    play(store, "r", 40)
    plans: list[str] = []
    with sqlite3.connect(path) as conn:
        for sql, params in (
            (
                "SELECT first_seq, last_seq, idx, seal, bodies FROM unbroken_segments WHERE run_id=? AND first_seq<=? "
                "ORDER BY first_seq DESC LIMIT 1",
                ("r", 20),
            ),
            (
                "SELECT first_seq, last_seq, idx, seal, bodies FROM unbroken_segments WHERE run_id=? AND first_seq>? "
                "AND first_seq<=? ORDER BY first_seq",
                ("r", 20, 40),
            ),
        ):
            plans.extend(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    conn.close()
    assert plans and all("SEARCH unbroken_segments USING INDEX" in plan for plan in plans), plans
    assert not any("TEMP B-TREE" in plan for plan in plans), plans
    with sqlite3.connect(path) as conn:
        segments = _sqlite_segments.segments_between(conn, "r", 20, 30)
    conn.close()
    assert segments and segments[0].first <= 21 and segments[-1].first <= 30
    assert [r.seq for r in store.backend.records_between("r", 20, 30)] == list(range(21, 31))


def test_packing_is_set_from_the_store_url_and_bad_values_are_refused(tmp_path: Path) -> None:
    from unbroken import open_store
    from unbroken.errors import InvalidStoreURL

    store = open_store(f"sqlite:///{tmp_path}/runs.db?keep_recent=3&pack_batch=5")
    assert isinstance(store, SQLiteStore) and (store.backend.keep_recent, store.backend.pack_batch) == (3, 5)
    store.close()
    for query, says in (
        ("keep_recent=x", "keep_recent must be a whole number, not 'x'"),
        ("pack_batch=1", "pack_batch one >= 2"),
        ("keep_recent=0", "keep_recent must be a whole number >= 1"),
        ("pack_size=4", "unknown option"),
    ):
        with pytest.raises(InvalidStoreURL, match=says):
            open_store(f"sqlite:///{tmp_path}/runs.db?{query}")


def test_a_short_run_is_read_without_msgspec_and_a_long_one_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below ``sealed_read_from`` records the load does not import msgspec for a handful of
    segments: each sealed segment is one orjson parse (``dicts_of``); at or above it, one typed
    msgspec parse (``records_of``). The same state as the careful read either way."""
    store = SQLiteStore(tmp_path / "runs.db", durability="normal", keep_recent=2, pack_batch=4)
    play(store, "r", 30)
    head = store.backend.read_head("r")
    assert head is not None
    calls: dict[str, list[int]] = {"records_of": [], "dicts_of": []}

    def counting(name: str) -> Any:
        real = getattr(segment_read, name)

        def count(segment: Segment, first_seq: int | None, current: int, run: RunRecords) -> list[Any] | None:
            found: list[Any] | None = real(segment, first_seq, current, run)
            calls[name].append(0 if found is None else len(found))
            return found

        return count

    for name in calls:
        monkeypatch.setattr(segment_read, name, counting(name))
    careful = decode("r", store.read_raw_records("r")).state  # record by record, every checksum
    assert store.load("r") == careful
    _, in_segments = table_counts(tmp_path / "runs.db")
    assert calls["records_of"] == [] and all(calls["dicts_of"]) and sum(calls["dicts_of"]) == in_segments
    store.sealed_read_from = head.seq
    calls["dicts_of"].clear()
    assert store.load("r") == careful
    assert calls["dicts_of"] == [] and all(calls["records_of"]) and sum(calls["records_of"]) == in_segments
