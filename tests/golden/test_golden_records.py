"""The on-disk format is pinned: golden records decode to the expected state and re-encode to the
same bytes, and records written by other JSON writers decode to the same state.

A failure here means the format changed. If that was deliberate, update docs/format.md, run
``tests/golden/regenerate.py`` and review the diff of tests/golden/run-1/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from unbroken.codec import Encoder, StoredRecord, checksum, decode

GOLDEN = Path(__file__).resolve().parent / "run-1"
SNAPSHOT_EVERY = 3  # what regenerate.py used


def golden_bodies() -> list[bytes]:
    # Split on b"\n" only: a body may hold U+2028, which str.splitlines() would also split on.
    return GOLDEN.joinpath("records.jsonl").read_bytes().split(b"\n")[:-1]


def golden_index() -> list[tuple[int, str, bool, str]]:
    rows = []
    for line in GOLDEN.joinpath("index.txt").read_text(encoding="utf-8").splitlines():
        seq, check, kind, label = line.split()
        rows.append((int(seq), check, kind == "snapshot", label))
    return rows


def golden_records() -> list[StoredRecord]:
    return [
        StoredRecord(seq, body, check) for (seq, check, _, _), body in zip(golden_index(), golden_bodies(), strict=True)
    ]


def expected_state() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GOLDEN.joinpath("state.json").read_text(encoding="utf-8"))
    return data


def test_golden_checksums_are_crc32_of_the_exact_bytes() -> None:
    for record in golden_records():
        assert checksum(record.body) == record.checksum


def test_golden_records_decode_to_the_expected_state() -> None:
    state = decode("golden-1", golden_records()).state
    expected = expected_state()
    assert state.small_fields() == expected["fields"]
    assert state.messages == expected["messages"]


def test_golden_records_re_encode_byte_identically() -> None:
    records = golden_records()
    encoder = Encoder(SNAPSHOT_EVERY)
    for position, (seq, check, snapshot, label) in enumerate(golden_index()):
        state = decode("golden-1", records[: position + 1]).state  # the state at this save point
        encoded = encoder.encode(state, label)
        encoder.committed(state, encoded)
        assert encoded.body.encode() == records[position].body, f"record {seq} re-encodes differently"
        assert (encoded.checksum, encoded.snapshot) == (check, snapshot)


def _rewritten(write: Any) -> list[StoredRecord]:
    out = []
    for record in golden_records():
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
def test_records_written_by_another_json_writer_decode_to_the_same_state(writer: Any) -> None:
    records = _rewritten(writer)
    assert [r.body for r in records] != [r.body for r in golden_records()]  # other bytes, same values
    assert decode("golden-1", records).state == decode("golden-1", golden_records()).state
