"""Checkpoint schema 2: fewer repeated bytes per record, read beside schema 1 records in one run.

What each left-out byte is replaced by (docs/format.md, "Versioning"), and that every check the
fold made on schema 1 still catches a lost, reordered or damaged record."""

from __future__ import annotations

import json
from typing import Any

import pytest

from unbroken import CorruptCheckpoint, IncompatibleSchema, RunState
from unbroken.acceptance import run_seed
from unbroken.codec import Encoder, Migrations, PackedRecords, StoredRecord, checksum, decode, fold_fields, loads
from unbroken.state import ToolCall, occurrence_key

RUN = "r"


def record_of(body: str, seq: int | None = None) -> StoredRecord:
    value = loads(body)
    return StoredRecord(seq if seq is not None else value["seq"], body, checksum(body, run_seed(RUN)))


class Writer:
    """Saves a run the way ``RunSession.save`` does, at a chosen schema per save."""

    def __init__(self, version: int = 2, snapshot_every: int = 50) -> None:
        self.state = RunState(run_id=RUN, task="t", messages=[{"role": "user", "content": "t"}], schema_version=version)
        self.encoder = Encoder(snapshot_every)
        self.records: list[StoredRecord] = []
        self.states: list[RunState] = []

    def save(self, label: str = "save") -> dict[str, Any]:
        state = self.state
        state.save_seq += 1
        encoded = self.encoder.encode(state, label)
        self.encoder.committed(state, encoded)
        self.records.append(StoredRecord(encoded.seq, encoded.body, encoded.checksum))
        self.states.append(RunState.from_parts(json.loads(json.dumps(state.small_fields())), list(state.messages)))
        return loads(encoded.body)  # type: ignore[no-any-return]

    def anthropic_turn(self, n: int, *, key: str | None = None) -> dict[str, Any]:
        call_id = f"toolu_{n}"
        block = {"type": "tool_use", "id": call_id, "name": "look", "input": {"n": n, "deep": {"xs": [1, 2.5]}}}
        self.state.messages.append({"role": "assistant", "content": [{"type": "text", "text": "hm"}, block]})
        key = key or occurrence_key(RUN, self.state.save_seq + 1, 0, call_id)
        self.state.pending_calls = [ToolCall(call_id, "look", dict(block["input"]), key)]  # type: ignore[arg-type]
        self.state.phase = "running_tools"
        record = self.save("model_turn")
        self.state.messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id}]})
        self.state.pending_calls, self.state.phase = [], "awaiting_model"
        self.save("tools_done")
        return record


def test_a_delta_leaves_out_snapshot_false_and_the_fields_the_reader_derives() -> None:
    writer = Writer()
    first = writer.save("start")
    record = writer.anthropic_turn(1)
    assert first["snapshot"] is True and "snapshot" not in record
    assert not {"save_seq", "message_count"} & set(record["fields"])
    state = decode(RUN, writer.records).state
    assert (state.save_seq, len(state.messages)) == (3, 3) and state == writer.states[-1]


def test_a_pending_call_points_at_its_block_and_comes_back_whole() -> None:
    writer = Writer()
    writer.save("start")
    record = writer.anthropic_turn(1)
    assert record["fields"]["pending_calls"] == [{"at": [0, "content", 1]}]
    at_a = decode(RUN, writer.records[:2]).state
    assert at_a == writer.states[1]
    (call,) = at_a.pending_calls
    assert call.input == {"n": 1, "deep": {"xs": [1, 2.5]}} and call.idempotency_key == occurrence_key(
        RUN, 2, 0, "toolu_1"
    )
    assert call.input is not at_a.messages[1]["content"][1]["input"]  # a copy, as the live call's is


def test_a_key_that_is_not_the_occurrence_key_of_its_record_is_kept() -> None:
    writer = Writer()
    writer.save("start")
    record = writer.anthropic_turn(1, key="ub_legacy")
    assert record["fields"]["pending_calls"] == [{"at": [0, "content", 1], "idempotency_key": "ub_legacy"}]
    assert decode(RUN, writer.records[:2]).state == writer.states[1]


def test_arguments_held_as_text_openai_chat_are_written_in_full() -> None:
    writer = Writer()
    writer.save("start")
    call = {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": '{"n": 1}'}}
    writer.state.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    writer.state.pending_calls = [ToolCall("call_1", "look", {"n": 1}, occurrence_key(RUN, 2, 0, "call_1"))]
    record = writer.save("model_turn")
    assert record["fields"]["pending_calls"] == [{"id": "call_1", "name": "look", "input": {"n": 1}}]
    assert decode(RUN, writer.records).state == writer.states[-1]


def test_an_input_python_calls_equal_but_json_does_not_is_never_referenced() -> None:
    writer = Writer()
    writer.save("start")
    block = {"type": "tool_use", "id": "x", "name": "look", "input": {"n": 1, "flag": 1}}
    writer.state.messages.append({"role": "assistant", "content": [block]})
    writer.state.pending_calls = [ToolCall("x", "look", {"n": 1.0, "flag": True}, "k")]
    record = writer.save("model_turn")
    assert "at" not in record["fields"]["pending_calls"][0]
    loaded = decode(RUN, writer.records).state.pending_calls[0].input
    assert json.dumps(loaded) == '{"n": 1.0, "flag": true}'


def test_a_run_of_schema_1_records_continued_at_schema_2_is_read_as_it_is() -> None:
    writer = Writer(version=1, snapshot_every=4)
    writer.save("start")
    for n in range(1, 4):
        writer.anthropic_turn(n)
    writer.state.schema_version = 2  # what RunSession.open does for a schema 1 run
    for n in range(4, 7):
        writer.anthropic_turn(n)
    versions = [loads(record.body)["v"] for record in writer.records]
    assert versions == [1] * 7 + [2] * 6
    for end in range(1, len(writer.records) + 1):
        decoded = decode(RUN, writer.records[:end])
        assert decoded.state == writer.states[end - 1] and decoded.migrated_from is None, end


def test_a_lost_or_reordered_record_is_still_caught() -> None:
    writer = Writer()
    writer.save("start")
    for n in range(1, 4):
        writer.anthropic_turn(n)
    records = writer.records
    with pytest.raises(CorruptCheckpoint, match="record 3 is missing"):
        decode(RUN, [*records[:2], *records[3:]])
    # Two records filed under each other's seq: each names its own seq.
    swapped = [
        *records[:2],
        StoredRecord(3, records[3].body, records[3].checksum),
        StoredRecord(4, records[2].body, records[2].checksum),
    ]
    with pytest.raises(CorruptCheckpoint, match="claims seq"):
        decode(RUN, swapped)
    # A record rewritten at another place in the history (seq right, msg_start wrong).
    moved = loads(records[2].body)
    moved["msg_start"] += 1
    with pytest.raises(CorruptCheckpoint, match="starts at message"):
        decode(RUN, [*records[:2], record_of(json.dumps(moved)), *records[3:]])


def test_a_reference_to_no_such_place_is_damage() -> None:
    writer = Writer()
    writer.save("start")
    writer.anthropic_turn(1)
    body = loads(writer.records[1].body)
    body["fields"]["pending_calls"] = [{"at": [0, "content", 7]}]
    with pytest.raises(CorruptCheckpoint, match="not a place"):
        decode(RUN, [writer.records[0], record_of(json.dumps(body))])


def test_a_newer_schema_is_refused() -> None:
    writer = Writer(version=3)
    writer.save("start")
    with pytest.raises(IncompatibleSchema, match="newer"):
        decode(RUN, writer.records)
    assert decode(RUN, writer.records, migrations=Migrations(current=3)).state.schema_version == 3


def test_a_field_that_goes_away_makes_the_record_a_snapshot() -> None:
    writer = Writer()
    writer.save("start")
    writer.state.conversation = {"inbox": []}
    assert "snapshot" not in writer.save()
    writer.state.conversation = None
    assert writer.save()["snapshot"] is True
    assert decode(RUN, writer.records).state.conversation is None


def test_history_checked_beyond_the_history_is_damage() -> None:
    writer = Writer()
    writer.save("start")
    writer.state.history_checked = 1
    writer.save()
    assert decode(RUN, writer.records).state.history_checked == 1
    body = loads(writer.records[1].body)
    body["fields"]["history_checked"] = 5
    with pytest.raises(CorruptCheckpoint, match="history_checked"):
        decode(RUN, [writer.records[0], record_of(json.dumps(body))])


def test_fold_fields_gives_the_state_at_every_save_point_for_both_schemas() -> None:
    writer = Writer(version=1, snapshot_every=3)
    writer.save("start")
    writer.anthropic_turn(1)
    writer.state.schema_version = 2
    writer.anthropic_turn(2)
    writer.anthropic_turn(3)
    fields = None
    for record, state in zip(writer.records, writer.states, strict=True):
        fields = fold_fields(fields, loads(record.body))
        assert fields == state.small_fields()


def test_the_optional_fields_the_encoder_knows_are_those_small_fields_leaves_out() -> None:
    from unbroken.codec import _OPTIONAL_FIELDS

    bare = RunState(run_id=RUN, task="t")
    full = RunState(run_id=RUN, task="t", approvals={}, conversation={}, history_checked=1, resumes=1)
    assert set(full.small_fields()) - set(bare.small_fields()) == set(_OPTIONAL_FIELDS)


def test_a_turn_laid_out_unlike_the_last_one_is_still_found() -> None:
    writer = Writer()
    writer.save("start")
    writer.anthropic_turn(1)  # the input at [0, "content", 1]
    block = {"type": "tool_use", "id": "toolu_2", "name": "look", "input": {"n": 2}}
    writer.state.messages.append({"role": "assistant", "content": [block]})
    writer.state.pending_calls = [ToolCall("toolu_2", "look", {"n": 2}, occurrence_key(RUN, 4, 0, "toolu_2"))]
    record = writer.save("model_turn")
    assert record["fields"]["pending_calls"] == [{"at": [0, "content", 0]}]
    assert decode(RUN, writer.records).state == writer.states[-1]


def _outcome(records: Any, **options: Any) -> Any:
    try:
        decoded = decode(RUN, records, **options)
    except (CorruptCheckpoint, IncompatibleSchema) as exc:
        return type(exc).__name__, getattr(exc, "last_good_seq", None)
    return decoded.state, decoded.last_seq, decoded.corrupt_seq, decoded.problem, decoded.migrated_from


def _damaged_runs() -> dict[str, list[StoredRecord]]:
    writer = Writer(version=1, snapshot_every=3)
    writer.save("start")
    writer.anthropic_turn(1)
    writer.state.schema_version = 2
    for n in range(2, 5):
        writer.anthropic_turn(n)
    good = writer.records
    torn = StoredRecord(5, good[4].body[:-3], good[4].checksum)
    moved = loads(good[3].body)
    moved["msg_start"] += 1
    future = Writer(version=3)
    future.save("start")
    return {
        "intact": good,
        "torn": [*good[:4], torn, *good[5:]],
        "missing": [*good[:3], *good[4:]],
        "moved": [*good[:3], record_of(json.dumps(moved)), *good[4:]],
        "moved-then-torn": [*good[:3], record_of(json.dumps(moved)), torn, *good[5:]],
        "first-torn": [StoredRecord(1, good[0].body[:-1], good[0].checksum), *good[1:]],
        "empty": [],
        "newer": future.records,
    }


@pytest.mark.parametrize("recover", [False, True])
@pytest.mark.parametrize("case", sorted(_damaged_runs()))
def test_folding_while_parsing_decodes_exactly_as_keeping_the_records(case: str, recover: bool) -> None:
    records = _damaged_runs()[case]
    kept = _outcome(records, recover=recover)
    streamed = _outcome(records, recover=recover, keep_records=False)
    if case == "moved-then-torn" and not recover:  # both refuse; each names what it met first
        assert kept[0] == streamed[0] == "CorruptCheckpoint"
    else:
        assert streamed == kept


@pytest.mark.parametrize("case", ["intact", "torn", "missing"])
def test_folding_while_parsing_a_packed_buffer_decodes_as_keeping_the_records(case: str) -> None:
    records = _damaged_runs()[case]
    bodies = [record.body.encode() if isinstance(record.body, str) else record.body for record in records]
    packed = PackedRecords(
        b"[" + b",".join(bodies) + b"]", [(r.seq, r.checksum, len(b)) for r, b in zip(records, bodies, strict=True)]
    )
    assert _outcome(packed, recover=True, keep_records=False) == _outcome(records, recover=True)
    assert _outcome(packed, keep_records=False) == _outcome(records)
