"""The on-disk format is pinned: golden records decode to the expected state and re-encode to the
same bytes, and records written by other JSON writers decode to the same state. One golden run per
format: run-1 (schema 1, as older versions wrote it), run-2 (schema 2) and run-mixed (a schema 1
run continued at schema 2); and segment-2, run-2's records packed into one segment (the layout
stores pack older records in, docs/format.md "Segments").

A failure here means the format changed. If that was deliberate, update docs/format.md, run
``tests/golden/regenerate.py`` and review the diff of tests/golden/run-*/ (run-1 must not change).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from unbroken import segment_read
from unbroken.acceptance import RunRecords, run_seed
from unbroken.codec import (
    Encoder,
    Segment,
    StoredRecord,
    checksum,
    decode,
    fold_fields,
    loads,
    pack_records,
    segment_seal,
)

HERE = Path(__file__).resolve().parent
RUNS = ["run-1", "run-2", "run-mixed"]
SNAPSHOT_EVERY = 3  # what regenerate.py used
BOUND_TO_GOLDEN = b"unbroken run\x00golden-1\x00"
"""What a record checksum of run ``golden-1`` starts with, before the body (docs/format.md)."""

by_run = pytest.mark.parametrize("run", RUNS)


def golden_bodies(run: str) -> list[bytes]:
    # Split on b"\n" only: a body may hold U+2028, which str.splitlines() would also split on.
    return HERE.joinpath(run, "records.jsonl").read_bytes().split(b"\n")[:-1]


def golden_index(run: str) -> list[tuple[int, str, bool, str]]:
    rows = []
    for line in HERE.joinpath(run, "index.txt").read_text(encoding="utf-8").splitlines():
        seq, check, kind, label = line.split()
        rows.append((int(seq), check, kind == "snapshot", label))
    return rows


def golden_records(run: str) -> list[StoredRecord]:
    return [
        StoredRecord(seq, body, check)
        for (seq, check, _, _), body in zip(golden_index(run), golden_bodies(run), strict=True)
    ]


def expected_state(run: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(HERE.joinpath(run, "state.json").read_text(encoding="utf-8"))
    return data


@by_run
def test_golden_checksums_are_crc32_of_the_exact_bytes(run: str) -> None:
    # Written before records were bound to their run: the plain CRC-32, still read as such.
    for record in golden_records(run):
        assert checksum(record.body) == record.checksum


@by_run
def test_golden_records_decode_to_the_expected_state(run: str) -> None:
    decoded = decode("golden-1", golden_records(run))
    expected = expected_state(run)
    assert decoded.state.small_fields() == expected["fields"]
    assert decoded.state.messages == expected["messages"]
    assert decoded.migrated_from is None  # schema 1 is read as it is: never rewritten for schema 2


def test_the_golden_runs_are_the_formats_they_pin() -> None:
    versions = {run: [loads(body)["v"] for body in golden_bodies(run)] for run in RUNS}
    assert versions == {"run-1": [1] * 9, "run-2": [2] * 9, "run-mixed": [1] * 5 + [2] * 4}
    run2 = [loads(body) for body in golden_bodies("run-2")]
    assert all("snapshot" not in record or record["snapshot"] is True for record in run2)
    assert not any({"save_seq", "message_count"} & set(record["fields"]) for record in run2)
    assert run2[1]["fields"]["pending_calls"] == [{"at": [0, "content", 1]}]  # key and input left out


@by_run
def test_golden_records_re_encode_byte_identically(run: str) -> None:
    records = golden_records(run)
    encoder = Encoder(SNAPSHOT_EVERY)
    for position, (seq, check, snapshot, label) in enumerate(golden_index(run)):
        state = decode("golden-1", records[: position + 1]).state  # the state at this save point
        encoded = encoder.encode(state, label)
        encoder.committed(state, encoded)
        assert encoded.body_bytes() == records[position].body, f"record {seq} re-encodes differently"
        assert encoded.snapshot == snapshot
        # Now bound to the run: the CRC-32 of "unbroken run" NUL run id NUL, then the same bytes.
        assert check == checksum(encoded.body)
        assert encoded.checksum == f"{zlib.crc32(BOUND_TO_GOLDEN + encoded.body_bytes()):08x}"


@by_run
def test_folding_each_record_gives_the_state_at_each_save_point(run: str) -> None:
    records = golden_records(run)
    fields = None
    for position, record in enumerate(records):
        fields = fold_fields(fields, loads(record.body))
        assert fields == decode("golden-1", records[: position + 1]).state.small_fields()


def _rewritten(run: str, write: Any) -> list[StoredRecord]:
    out = []
    for record in golden_records(run):
        body = write(json.loads(record.body)).encode()
        out.append(StoredRecord(record.seq, body, checksum(body)))
    return out


@pytest.mark.parametrize(
    "writer",
    [
        pytest.param(lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")), id="stdlib-compact"),
        pytest.param(lambda v: json.dumps(v, ensure_ascii=True, indent=2), id="stdlib-ascii-indented"),
    ],
)
@by_run
def test_records_written_by_another_json_writer_decode_to_the_same_state(run: str, writer: Any) -> None:
    records = _rewritten(run, writer)
    assert [r.body for r in records] != [r.body for r in golden_records(run)]  # other bytes, same values
    assert decode("golden-1", records).state == decode("golden-1", golden_records(run)).state


def golden_segment() -> Segment:
    here = HERE / "segment-2"
    first, last, seal = here.joinpath("seal.txt").read_text(encoding="ascii").split()
    index_text = here.joinpath("index.json").read_bytes().removesuffix(b"\n")
    bodies = here.joinpath("bodies.json").read_bytes().removesuffix(b"\n")
    return Segment(int(first), int(last), index_text, bodies, seal)


def test_packing_the_golden_run_gives_the_golden_segment_byte_for_byte() -> None:
    """The segment layout (index, bodies, seal) is pinned like the records' (docs/format.md)."""
    packed = pack_records("golden-1", golden_records("run-2"))
    assert packed is not None
    segment, snapshots = packed
    golden = golden_segment()  # packed before segments were bound to their run: its seal is from seed 0
    assert (segment.first, segment.last, segment.index_text, segment.bodies) == (
        golden.first,
        golden.last,
        golden.index_text,
        golden.bodies,
    )
    assert golden.seal == segment_seal(golden.index_text, golden.bodies)
    assert segment.seal == segment_seal(golden.index_text, golden.bodies, run_seed("golden-1"))
    assert snapshots == [seq for seq, _, snapshot, _ in golden_index("run-2") if snapshot]


def test_the_golden_segment_holds_the_golden_records_and_reads_sealed_to_the_same_state() -> None:
    segment = golden_segment()
    assert segment.records() == [StoredRecord(r.seq, r.body, r.checksum) for r in golden_records("run-2")]
    assert segment_read.records_of(segment, 1, 2, RunRecords("golden-1")) is not None  # the sealed read takes it
    fast = decode("golden-1", [segment], keep_records=False)
    careful = decode("golden-1", golden_records("run-2"))
    assert fast.state == careful.state
    assert fast.state.messages == expected_state("run-2")["messages"]


def test_a_segment_of_mixed_versions_is_read_record_by_record_to_the_same_state() -> None:
    packed = pack_records("golden-1", golden_records("run-mixed"))
    assert packed is not None
    segment, _ = packed
    assert segment_read.records_of(segment, 1, 2, RunRecords("golden-1")) is None  # schema 1 records: the careful read
    assert (
        decode("golden-1", [segment], keep_records=False).state == decode("golden-1", golden_records("run-mixed")).state
    )
