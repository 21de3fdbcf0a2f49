"""The codec: JSON guard, records, checksums, schema migrations."""

from __future__ import annotations

import datetime
import json
import math
import uuid
from dataclasses import dataclass
from typing import cast

import pytest

from unbroken import CorruptCheckpoint, IncompatibleSchema, NotJSONValue, RunState
from unbroken.codec import Encoder, Migrations, PackedRecords, StoredRecord, decode, ensure_json


@dataclass
class Point:
    x: int
    y: int


def saves_of(states: list[RunState], snapshot_every: int = 50) -> list[StoredRecord]:
    encoder = Encoder(snapshot_every)
    records = []
    for state in states:
        encoded = encoder.encode(state, "save")
        encoder.committed(state, encoded)
        records.append(StoredRecord(encoded.seq, encoded.body, encoded.checksum))
    return records


def growing_run(saves: int) -> list[RunState]:
    state = RunState(run_id="r", task="t", messages=[{"role": "user", "content": "t"}])
    states = []
    for seq in range(1, saves + 1):
        state.save_seq = seq
        state.turns = seq // 2
        state.messages.append({"role": "assistant", "content": [{"type": "text", "text": f"m{seq}"}]})
        state.business_state["step"] = seq
        snapshot = json.loads(json.dumps(state.small_fields()))
        states.append(RunState.from_parts(snapshot, list(state.messages)))
    return states


def test_a_record_holds_only_the_new_messages_and_changed_fields() -> None:
    states = growing_run(3)
    states[1].updated_at = states[0].updated_at
    second = json.loads(saves_of(states)[1].body)
    assert second["msg_start"] == 2 and len(second["messages"]) == 1
    assert "snapshot" not in second  # format v2: false is the default
    assert set(second["fields"]) == {"turns", "business_state"}  # save_seq, message_count: derived


def test_folding_records_gives_back_the_last_state() -> None:
    states = growing_run(12)
    decoded = decode("r", saves_of(states, snapshot_every=5))
    assert decoded.state == states[-1]
    assert [info.snapshot for info in decoded.timeline][:7] == [True, False, False, False, False, True, False]


def test_in_place_mutation_of_business_state_is_saved() -> None:
    state = RunState(run_id="r", task="t", save_seq=1)
    encoder = Encoder()
    first = encoder.encode(state, "a")
    encoder.committed(state, first)
    state.business_state["added"] = [1]
    state.save_seq = 2
    second = encoder.encode(state, "b")
    records = [StoredRecord(1, first.body, first.checksum), StoredRecord(2, second.body, second.checksum)]
    assert decode("r", records).state.business_state == {"added": [1]}


def test_every_flipped_byte_of_a_record_is_detected() -> None:
    records = saves_of(growing_run(2))
    body = cast(str, records[1].body)  # the Encoder makes text bodies
    for index in range(len(body)):
        flipped = body[:index] + chr(ord(body[index]) ^ 1) + body[index + 1 :]
        with pytest.raises(CorruptCheckpoint):
            decode("r", [records[0], StoredRecord(2, flipped, records[1].checksum)])


def test_recover_loads_the_last_intact_save_point() -> None:
    states = growing_run(4)
    records = saves_of(states)
    records[2] = StoredRecord(3, records[2].body[:-5], records[2].checksum)
    decoded = decode("r", records, recover=True)
    assert decoded.state == states[1] and decoded.corrupt_seq == 3 and decoded.problem


def test_a_missing_record_in_the_middle_is_detected() -> None:
    records = saves_of(growing_run(4))
    with pytest.raises(CorruptCheckpoint, match="record 2 is missing"):
        decode("r", [records[0], records[2], records[3]])


def test_older_schemas_are_migrated_by_registered_steps() -> None:
    records = saves_of(growing_run(2))
    migrations = Migrations(current=4)

    @migrations.register(2)
    def rename(run: dict) -> dict:  # type: ignore[type-arg]
        run["fields"]["business_state"] = {"renamed": run["fields"]["business_state"]}
        return run

    @migrations.register(3)
    def tag(run: dict) -> dict:  # type: ignore[type-arg]
        run["messages"].append({"role": "user", "content": "migrated"})
        run["fields"]["message_count"] += 1
        return run

    decoded = decode("r", records, migrations=migrations)
    assert decoded.migrated_from == 2 and decoded.state.schema_version == 4
    assert decoded.state.business_state == {"renamed": {"step": 2}}
    assert decoded.state.messages[-1] == {"role": "user", "content": "migrated"}


def test_a_missing_migration_step_is_refused() -> None:
    with pytest.raises(IncompatibleSchema, match="no migration to 3"):
        decode("r", saves_of(growing_run(1)), migrations=Migrations(current=3))


def test_a_newer_schema_is_refused_even_when_recovering() -> None:
    records = saves_of(growing_run(1))
    with pytest.raises(IncompatibleSchema, match="newer"):
        decode("r", records, migrations=Migrations(current=0), recover=True)


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("-inf"), b"x", (1,), {1, 2}, object(), {"k": [{"deep": bytearray()}]}],
)
def test_ensure_json_refuses_what_json_cannot_hold(value: object) -> None:
    with pytest.raises(NotJSONValue):
        ensure_json(value, "x")


def test_ensure_json_refuses_absurd_nesting() -> None:
    value: list[object] = []
    for _ in range(500):
        value = [value]
    with pytest.raises(NotJSONValue, match="nesting"):
        ensure_json(value, "x")


def packed_of(records: list[StoredRecord]) -> PackedRecords:
    bodies = [r.body if isinstance(r.body, bytes) else r.body.encode() for r in records]
    return PackedRecords(
        b"[" + b",".join(bodies) + b"]", [(r.seq, r.checksum, len(b)) for r, b in zip(records, bodies, strict=True)]
    )


def test_a_packed_read_folds_to_the_same_state_as_record_by_record() -> None:
    states = growing_run(7)
    records = saves_of(states, snapshot_every=3)
    assert decode("r", packed_of(records)).state == decode("r", records).state == states[-1]


def test_damage_in_a_packed_read_is_judged_record_by_record() -> None:
    states = growing_run(4)
    records = saves_of(states)
    damaged = list(records)
    damaged[2] = StoredRecord(3, cast(str, records[2].body).replace('"m3"', '"mX"'), records[2].checksum)
    with pytest.raises(CorruptCheckpoint, match="save record 3"):
        decode("r", packed_of(damaged))
    assert decode("r", packed_of(damaged), recover=True).state == states[1]


def test_a_misordered_packed_read_uses_the_stores_ordered_read_and_finds_no_damage() -> None:
    states = growing_run(4)
    records = saves_of(states)
    swapped = packed_of([records[1], records[0], records[2], records[3]])
    swapped_index = [(r.seq, r.checksum, len(cast(str, r.body).encode())) for r in records]
    misordered = PackedRecords(swapped.buffer, swapped_index)
    assert decode("r", misordered, fallback=lambda: records).state == states[-1]


def test_an_integer_beyond_64_bits_is_refused_with_its_path() -> None:
    state = RunState(run_id="r", task="t", save_seq=1, business_state={"order": {"id": 2**64}})
    with pytest.raises(NotJSONValue, match=r"business_state\.order\.id: an integer beyond 64 bits"):
        Encoder().encode(state, "a")


def test_64_bit_integers_at_both_ends_survive_a_round_trip() -> None:
    state = RunState(run_id="r", task="t", save_seq=1, business_state={"lo": -(2**63), "hi": 2**64 - 1})
    encoded = Encoder().encode(state, "a")
    loaded = decode("r", [StoredRecord(1, encoded.body, encoded.checksum)]).state
    assert loaded.business_state == {"lo": -(2**63), "hi": 2**64 - 1}


def test_nan_in_a_message_from_a_json_model_is_still_refused() -> None:
    # The fast encoder writes NaN as null; the encoder must notice instead of saving a null.
    state = RunState(run_id="r", task="t", save_seq=1, messages=[{"role": "user", "content": [{"score": math.nan}]}])
    with pytest.raises(NotJSONValue, match=r"messages\[0"):
        Encoder(messages_are_json=True).encode(state, "a")


@pytest.mark.parametrize("value", [datetime.datetime(2026, 1, 1), Point(1, 2), uuid.UUID(int=1)])
def test_objects_a_fast_encoder_would_convert_are_refused(value: object) -> None:
    state = RunState(run_id="r", task="t", save_seq=1, business_state={"x": value})
    with pytest.raises(NotJSONValue, match=r"business_state\.x"):
        Encoder().encode(state, "a")
