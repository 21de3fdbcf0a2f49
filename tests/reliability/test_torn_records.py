"""Guarantee 5: a torn or bit-flipped save record is always detected (``CorruptCheckpoint``),
never loaded as a silently wrong state, and ``recover=True`` loads the last intact save point."""

from __future__ import annotations

import random
from pathlib import Path
from typing import cast

import pytest

from faults_kit import flip_bits
from unbroken import CorruptCheckpoint, open_store
from unbroken.codec import StoredRecord, decode


def _expected(records: list[StoredRecord], good: int) -> object:
    return decode("sample", records[:good]).state


def _assert_detected(records: list[StoredRecord], damaged_index: int) -> None:
    with pytest.raises(CorruptCheckpoint) as caught:
        decode("sample", records)
    assert caught.value.last_good_seq == damaged_index
    recovered = decode("sample", records, recover=True)
    assert recovered.last_seq == damaged_index
    assert recovered.state == _expected(records, damaged_index)


def test_a_record_truncated_at_any_byte_is_detected_and_the_save_before_it_loads(
    sample_records: list[StoredRecord],
) -> None:
    cases = 0
    for index in (1, len(sample_records) // 2, len(sample_records) - 1):
        record = sample_records[index]
        for cut in range(len(record.body)):
            torn = [*sample_records[:index], StoredRecord(record.seq, record.body[:cut], record.checksum)]
            _assert_detected(torn + sample_records[index + 1 :], index)
            cases += 1
    assert cases > 1000


def test_ten_thousand_random_bit_flips_are_all_detected(sample_records: list[StoredRecord]) -> None:
    rng = random.Random(20261101)
    for _ in range(10_000):
        index = rng.randrange(1, len(sample_records))
        record = sample_records[index]
        damaged = flip_bits(record, rng, rng.randint(1, 4))
        _assert_detected([*sample_records[:index], damaged, *sample_records[index + 1 :]], index)


def test_a_record_file_cut_at_any_byte_is_detected_by_the_file_store(
    sample_records: list[StoredRecord], tmp_path: Path
) -> None:
    from unbroken.codec import EncodedSave
    from unbroken.state import RunSummary

    store = open_store(f"file://{tmp_path / 'store'}")
    summary = RunSummary("sample", "t", "running_tools", 0, 0, 0, 0.0)
    for seq, record in enumerate(sample_records, start=1):
        body = cast(str, record.body)  # read_records hands back the text it was given
        save = EncodedSave("sample", seq, "x", body, record.checksum, seq == 1, summary)
        store.append(save, expect_seq=seq - 1)
    last = tmp_path / "store" / "runs" / "sample" / "records" / f"{len(sample_records):012d}.json"
    whole = last.read_bytes()
    good = len(sample_records) - 1
    expected = _expected(sample_records, good)
    for cut in range(len(whole) - 1):  # the final newline is not part of the record
        last.write_bytes(whole[:cut])
        with pytest.raises(CorruptCheckpoint):
            store.load("sample")
        assert store.load("sample", recover=True) == expected
    store.close()


@pytest.mark.slow
def test_a_hundred_thousand_random_bit_flips_are_all_detected(sample_records: list[StoredRecord]) -> None:
    rng = random.Random(7)
    for _ in range(100_000):
        index = rng.randrange(1, len(sample_records))
        damaged = flip_bits(sample_records[index], rng, rng.randint(1, 8))
        _assert_detected([*sample_records[:index], damaged, *sample_records[index + 1 :]], index)
