"""Guarantee 7: whatever bytes sit in a store, loading ends in a state or a typed error
(``CorruptCheckpoint`` / ``IncompatibleSchema``), in bounded time; oversized records are
refused before they are parsed; nothing is unpickled or imported (the codec is JSON only)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unbroken import CorruptCheckpoint, IncompatibleSchema, RunNotFound, acceptance, codec, open_store
from unbroken.codec import StoredRecord, checksum, decode

TYPED = (CorruptCheckpoint, IncompatibleSchema)
FUZZ = settings(max_examples=120, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)
hostile_texts = st.one_of(
    st.integers(1, 200_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 200_000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.integers(1, 100_000).map(lambda n: "9" * n),
    st.integers(1, 2_000_000).map(lambda n: '"' + "x" * n + '"'),
    st.sampled_from(["NaN", "Infinity", "-Infinity", '{"v":1,"v":2,"seq":1}', "\ud800", "", "{", "null", "[]"]),
    st.binary(max_size=300).map(lambda raw: raw.decode("utf-8", errors="surrogateescape")),
    st.text(max_size=300),
)
record_fields = st.fixed_dictionaries(
    {},
    optional={
        "v": st.one_of(st.just(1), st.integers(), json_values),
        "seq": st.one_of(st.just(1), json_values),
        "label": json_values,
        "snapshot": st.one_of(st.booleans(), json_values),
        "msg_start": st.one_of(st.just(0), json_values),
        "messages": st.one_of(st.lists(json_values, max_size=3), json_values),
        "fields": st.one_of(
            st.dictionaries(st.sampled_from(["run_id", "turns", "phase", "message_count"]), json_values), json_values
        ),
    },
)


def _decode_is_typed(records: list[StoredRecord]) -> None:
    started = time.perf_counter()
    for recover in (False, True):
        with contextlib.suppress(*TYPED):
            decode("r", records, recover=recover)
    assert time.perf_counter() - started < 2.0


@FUZZ
@given(body=hostile_texts)
def test_hostile_record_text_with_a_valid_checksum_gives_a_typed_error(body: str) -> None:
    body = body.encode("utf-8", errors="replace").decode("utf-8")
    _decode_is_typed([StoredRecord(1, body, checksum(body))])


@FUZZ
@given(records=st.lists(record_fields, min_size=1, max_size=4))
def test_records_with_wrong_shapes_and_types_give_a_typed_error(records: list[dict[str, object]]) -> None:
    texts = [json.dumps(record) for record in records]
    _decode_is_typed([StoredRecord(seq, text, checksum(text)) for seq, text in enumerate(texts, start=1)])


@FUZZ
@given(raw=st.one_of(st.binary(max_size=2000), hostile_texts.map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_the_file_store_loads_hostile_record_and_ledger_files_only_into_typed_errors(
    raw: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("hostile")
    store = open_store(f"file://{root}")
    store.acquire_lease("r", "me:1:1:x", 30)
    run = root / "runs" / "r"
    (run / "records" / f"{1:012d}.json").write_bytes(raw)
    (run / "effects" / "ub_key.json").write_bytes(raw)
    (run / "lease.json").write_bytes(raw)
    started = time.perf_counter()
    for action in (lambda: store.load("r"), lambda: store.ledger_list("r"), lambda: store.lease_of("r")):
        try:
            action()
        except (*TYPED, RunNotFound):
            pass
    assert time.perf_counter() - started < 2.0
    store.close()


def test_a_record_over_the_size_cap_is_refused_before_it_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    body = json.dumps({"v": 1, "seq": 1, "padding": "x" * 5000})
    monkeypatch.setattr(acceptance, "MAX_RECORD_BYTES", 1000)
    parsed: list[str | bytes] = []
    real_loads = acceptance.loads

    def spying_loads(text: str | bytes) -> object:
        parsed.append(text)
        return real_loads(text)

    monkeypatch.setattr(acceptance, "loads", spying_loads)
    with pytest.raises(CorruptCheckpoint, match="cap"):
        decode("r", [StoredRecord(1, body, checksum(body))])
    assert parsed == []


def test_a_record_file_over_the_size_cap_is_refused_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unbroken.stores import files as file_store_module

    store = open_store(f"file://{tmp_path}")
    store.acquire_lease("r", "me:1:1:x", 30)
    record = tmp_path / "runs" / "r" / "records" / f"{1:012d}.json"
    with open(record, "wb") as handle:
        handle.truncate(codec.MAX_RECORD_BYTES + 2 * 1024 * 1024)  # sparse: no disk space used
    reads: list[str] = []
    real_open = open

    class Spy:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __getattr__(self, name: str) -> Any:
            if name.startswith("read"):
                reads.append(str(self.handle.name))
            return getattr(self.handle, name)

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

    monkeypatch.setattr(file_store_module, "open", lambda *a, **k: Spy(real_open(*a, **k)), raising=False)
    with pytest.raises(CorruptCheckpoint):
        store.load("r")
    assert str(record) not in reads
    store.close()
