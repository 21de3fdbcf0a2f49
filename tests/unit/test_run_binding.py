"""Every save record is bound to its run: its checksum is the CRC-32 of ``unbroken run`` NUL run
id NUL followed by its body (``acceptance.run_seed``), so a record copied into another run fails
its check there. Records written before (plain CRC-32) stay readable until a run's first bound
record; after it, a plain record is refused (docs/format.md, "Checksums")."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from unbroken import acceptance, segment_read
from unbroken.acceptance import RunRecords, run_seed
from unbroken.codec import Encoder, StoredRecord, checksum, decode, pack_records
from unbroken.errors import CorruptCheckpoint
from unbroken.state import RunState
from unbroken.testing.simulate.mutations import MUTATIONS

GOLDEN = Path(__file__).parent.parent / "golden" / "run-2"


def saves(run_id: str, count: int, *, snapshot_every: int = 50) -> list[StoredRecord]:
    state, encoder, records = RunState(run_id=run_id, task="same task"), Encoder(snapshot_every), []
    for step in range(1, count + 1):
        state.save_seq = step
        state.turns = step
        state.messages.append({"role": "assistant", "content": [{"type": "text", "text": f"step {step}"}]})
        encoded = encoder.encode(state, f"turn {step}")
        encoder.committed(state, encoded)
        records.append(StoredRecord(encoded.seq, encoded.body, encoded.checksum))
    return records


def test_a_records_checksum_is_the_crc32_of_its_runs_prefix_and_its_body() -> None:
    record = saves("run-a", 1)[0]
    body = record.body.encode() if isinstance(record.body, str) else record.body
    assert record.checksum == f"{zlib.crc32(b'unbroken run' + bytes([0]) + b'run-a' + bytes([0]) + body):08x}"
    assert record.checksum == checksum(body, run_seed("run-a")) != checksum(body)


def test_a_record_of_another_run_at_the_same_place_is_refused() -> None:
    a, b = saves("run-a", 3), saves("run-b", 3)
    assert a[2].body == b[2].body  # the same delta at the same message position
    with pytest.raises(CorruptCheckpoint, match=r"save record 3 of run 'run-b' is damaged: .*another run"):
        decode("run-b", [*b[:2], a[2]])
    assert decode("run-b", b).state.save_seq == 3


def test_a_plain_record_after_bound_ones_is_refused() -> None:
    # A record of a run written before runs were bound, copied into a run written now.
    b = saves("run-b", 3)
    plain = StoredRecord(3, b[2].body, checksum(b[2].body))
    with pytest.raises(CorruptCheckpoint, match="not bound to this run, after records that are"):
        decode("run-b", [*b[:2], plain])


def test_without_the_binding_the_copy_loads() -> None:
    with MUTATIONS["run_binding"]():
        a, b = saves("run-a", 3), saves("run-b", 3)
        assert decode("run-b", [*b[:2], a[2]]).state.save_seq == 3  # the hole the binding closes


def test_a_run_written_before_loads_and_goes_on_with_bound_records() -> None:
    # The golden run-2 (plain CRC-32s, as every release before wrote), continued by this version.
    bodies = GOLDEN.joinpath("records.jsonl").read_bytes().split(b"\n")[:-1]
    checks = [line.split()[1] for line in GOLDEN.joinpath("index.txt").read_text(encoding="utf-8").splitlines()]
    plain = [StoredRecord(seq, body, check) for seq, (body, check) in enumerate(zip(bodies, checks, strict=True), 1)]
    assert all(checksum(record.body) == record.checksum for record in plain)
    state = decode("golden-1", plain).state
    encoder = Encoder()
    encoder.prime(state)  # as a resume does
    state.save_seq += 1
    state.messages.append({"role": "user", "content": "go on"})
    encoded = encoder.encode(state, "resumed")
    assert encoded.checksum == checksum(encoded.body, run_seed("golden-1"))
    assert decode("golden-1", [*plain, StoredRecord(encoded.seq, encoded.body, encoded.checksum)]).state == state


def test_a_segment_is_sealed_for_its_run() -> None:
    a = saves("run-a", 4)
    packed = pack_records("run-a", a)
    assert packed is not None
    segment, _ = packed
    assert segment_read.records_of(segment, 1, 2, RunRecords("run-a")) is not None
    assert segment_read.records_of(segment, 1, 2, RunRecords("run-b")) is None  # the careful read judges it
    with pytest.raises(CorruptCheckpoint, match="another run"):
        decode("run-b", [segment], keep_records=False)
    assert decode("run-a", [segment], keep_records=False).state == decode("run-a", a).state


def test_a_segment_packed_before_reads_sealed_until_a_bound_record() -> None:
    a = saves("run-a", 4)
    plain = [StoredRecord(r.seq, r.body, checksum(r.body)) for r in a]
    with MUTATIONS["run_binding"]():
        packed = pack_records("run-a", plain)  # (as packed before: an unseeded seal)
    assert packed is not None
    assert segment_read.records_of(packed[0], 1, 2, RunRecords("run-a")) is not None
    after_bound = RunRecords("run-a")
    after_bound.plain = False
    assert segment_read.records_of(packed[0], 1, 2, after_bound) is None


def test_the_binding_is_on() -> None:
    assert acceptance._BIND_RECORDS is True


def test_a_damaged_record_of_a_run_written_before_is_named_as_before() -> None:
    # A plain record whose checksum holds but whose seq is not its place: "claims seq", not a
    # checksum problem (the rule of records written before judged it).
    with MUTATIONS["run_binding"]():
        plain = saves("run-old", 3)
    moved = StoredRecord(3, plain[1].body, plain[1].checksum)
    with pytest.raises(CorruptCheckpoint, match="record 3 of run 'run-old' is damaged: record claims seq 2"):
        decode("run-old", [*plain[:2], moved])
