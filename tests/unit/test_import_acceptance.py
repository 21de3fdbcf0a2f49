"""Import is the store's own acceptance (issue 21 item 8): what ``import`` accepts, every load
accepts and reads back unchanged; what it refuses is one line naming the field, and nothing is
written."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unbroken import ConfigError, IncompatibleSchema, Store, importing, open_store
from unbroken.ops import import_run

TASK = "Refund order 7 if it arrived broken"


def tool_use(call_id: str, name: str = "refund", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def textbook(*pending: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "task": TASK,
        "turns": 2,
        "tokensUsed": 220,
        "messages": [{"role": "user", "content": TASK}, {"role": "assistant", "content": list(pending)}],
        "pendingToolUse": list(pending) if len(pending) != 1 else pending[0],
    }


def article(**changes: Any) -> dict[str, Any]:
    document = {
        "run_id": "order-7",
        "step_id": 2,
        "phase": "pre_tool",
        "messages": [{"role": "user", "content": TASK}],
        "business_state": {"order": "7"},
        "pending_action": {"tool": "refund", "args": {"order_id": "7"}, "idempotency_key": "refund-7"},
        "schema_version": 3,
    }
    document.update(changes)
    return document


def refused(store: Store, document: dict[str, Any] | Path, error: type[Exception] = ConfigError) -> str:
    """The one-line refusal of importing ``document``; the run is not in ``store``."""
    with pytest.raises(error) as caught:
        import_run(store, document, "r")
    assert not store.exists("r")
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.fixture
def memory() -> Store:
    return open_store("memory://")


def test_three_calls_in_doubt_under_one_id_are_refused_not_merged(memory: Store) -> None:
    calls = [tool_use("toolu_1", order_id=str(n)) for n in range(3)]
    message = refused(memory, textbook(*calls))
    assert "messages[1].content[1].id 'toolu_1' is also messages[1].content[0].id" in message


def test_the_same_id_left_without_a_result_in_two_turns_is_refused(memory: Store) -> None:
    document = textbook(tool_use("toolu_1", order_id="1"))
    document["messages"] += [
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": [tool_use("toolu_1", order_id="2")]},
    ]
    assert "call id 'toolu_1' is left without a result more than once" in refused(memory, document)


def test_declared_pending_calls_sharing_an_id_are_refused(memory: Store) -> None:
    document = textbook(tool_use("toolu_1", order_id="1"))
    document["pendingToolUse"] = [tool_use("toolu_2", order_id="2"), tool_use("toolu_2", order_id="3")]
    assert "pendingToolUse[1].id 'toolu_2' is also pendingToolUse[0].id" in refused(memory, document)


@pytest.mark.parametrize(
    ("block", "path"),
    [
        ({"type": "tool_use", "name": "refund", "input": {}}, "messages[1].content[0].id must be a non-empty string"),
        ({"type": "tool_use", "id": "t", "input": {}}, "messages[1].content[0].name must be a non-empty string"),
        ({"type": "tool_use", "id": "t", "name": "refund", "input": "notobj"}, "messages[1].content[0].input is a str"),
        ({"type": "tool_use", "id": "t", "name": "refund"}, "messages[1].content[0].input is missing"),
        ("just text", "messages[1].content[0] is a str, not a block"),
    ],
)
def test_a_block_that_is_not_a_whole_call_is_refused_naming_its_path(memory: Store, block: Any, path: str) -> None:
    document = textbook()
    document["messages"][1]["content"] = [block]
    assert path in refused(memory, document)


def test_a_pending_tool_use_that_is_not_an_object_is_refused_not_dropped(memory: Store) -> None:
    document = textbook(tool_use("toolu_1"))
    document["pendingToolUse"] = [tool_use("toolu_1"), "notobj"]
    assert "pendingToolUse[1] is a str, not a tool_use block" in refused(memory, document)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("turns", 2**70, "turns: an integer beyond 64 bits does not survive every JSON reader"),
        ("turns", -1, "turns is -1, not a count"),
        ("tokensUsed", 2**53, "tokensUsed is an integer of 54 bits, not a count"),
        ("tokensUsed", 1.0, "tokensUsed is 1.0, not a count"),
        ("turns", True, "turns is True, not a count"),
    ],
)
def test_counters_out_of_range_are_refused_naming_the_field(memory: Store, field: str, value: Any, said: str) -> None:
    document = textbook(tool_use("toolu_1"))
    document[field] = value
    assert said in refused(memory, document)


def test_a_number_no_reader_keeps_is_refused_naming_its_path(memory: Store) -> None:
    document = textbook(tool_use("toolu_1", amount=2**70))
    message = refused(memory, document)
    assert message.startswith("cannot import the checkpoint: messages[1].content[0].input.amount: an integer beyond 64")


def test_nan_in_business_state_is_refused_naming_its_path(memory: Store) -> None:
    assert "business_state.ratio" in refused(memory, article(business_state={"ratio": float("nan")}))


def test_text_that_is_not_unicode_is_refused_naming_the_field(memory: Store) -> None:
    document = textbook(tool_use("toolu_1"))
    document["task"] = "refund \ud800"  # what json.loads makes of a lone "\\ud800" escape
    assert "task holds text that is not Unicode" in refused(memory, document)


def test_a_future_schema_version_is_incompatible(memory: Store) -> None:
    message = refused(memory, article(schema_version=999), IncompatibleSchema)
    assert "schema_version 999 is newer than the 3 this importer reads" in message
    document = textbook(tool_use("toolu_1"))
    document["version"] = 2
    assert "version 2 is newer than the 1" in refused(memory, document, IncompatibleSchema)


def test_a_schema_version_that_is_not_one_is_refused(memory: Store) -> None:
    assert "schema_version is '3', not a schema version" in refused(memory, article(schema_version="3"))


def test_deep_nesting_in_a_file_is_one_line(memory: Store, tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    text = json.dumps(textbook(tool_use("toolu_1", x="HERE")))
    path.write_text(text.replace('"HERE"', "[" * 100_000 + "]" * 100_000))
    assert "nested deeper than a checkpoint can be" in refused(memory, path)


def test_deep_nesting_in_a_parsed_checkpoint_is_refused_at_the_codec_depth(memory: Store) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    document = textbook(tool_use("toolu_1"))
    document["messages"][1]["content"][0]["input"]["x"] = deep
    assert "nesting deeper than 200 levels" in refused(memory, document)


def test_a_5000_digit_number_in_a_file_is_one_line(memory: Store, tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps(textbook(tool_use("toolu_1"))).replace('"turns": 2', '"turns": ' + "9" * 5000))
    assert "it holds a number of more than 4,300 digits" in refused(memory, path)


def test_an_import_that_would_not_read_back_writes_nothing(memory: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-back is the last gate: a record the codec's reader refuses is never written."""
    from unbroken import codec

    monkeypatch.setattr(codec, "accept_before_save", lambda fields, state: None)  # the encoder's own check off
    document = textbook(tool_use("toolu_1"))
    monkeypatch.setattr(importing, "token_count", lambda value: value)  # the importer's counter check off
    document["turns"] = -3
    assert "the run it makes would not load" in refused(memory, document)


# --------------------------------------------------------------------------- properties

ODD: st.SearchStrategy[Any] = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats()
    | st.text(max_size=4)
    | st.just("notobj")
    | st.just({})
    | st.just([])
)
VALUES = st.recursive(
    ODD,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=5,
)


def places(document: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``document`` (its containers' keys and indices), as paths."""
    found = [path]
    if isinstance(document, dict):
        for key, value in document.items():
            found += places(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += places(value, (*path, index))
    return found


def base_documents() -> list[dict[str, Any]]:
    two = textbook(tool_use("toolu_1", order_id="7"), tool_use("toolu_2", name="lookup", q="x"))
    return [two, article(), textbook(tool_use("toolu_3", order_id="9"))]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, 2),
    picks=st.lists(st.tuples(st.integers(0, 10_000), VALUES), max_size=3),
    top=st.dictionaries(
        st.sampled_from(["turns", "tokensUsed", "step_id", "schema_version", "version"]),
        st.sampled_from([-1, 2**53, 2**63, 2**64, 2**70, 10**5000]) | st.integers(-(2**80), 2**80) | VALUES,
        max_size=2,
    ),
)
def test_what_import_accepts_every_load_accepts_and_reads_back(
    which: int, picks: list[tuple[int, Any]], top: dict[str, Any]
) -> None:
    document = copy.deepcopy(base_documents()[which])
    document.update((key, value) for key, value in top.items() if key in document)
    for choice, value in picks:
        spots = places(document)[1:]
        path = spots[choice % len(spots)]
        holder = document
        for step in path[:-1]:
            holder = holder[step]
        holder[path[-1]] = value
    with open_store("memory://") as store:
        try:
            state = import_run(store, document, "r")
        except (ConfigError, IncompatibleSchema) as exc:
            assert not store.exists("r")
            assert "\n" not in str(exc)
            return
        loaded = store.load("r")
        assert loaded.small_fields() == state.small_fields() and loaded.messages == state.messages
        assert len(loaded.pending_calls) == len({call.id for call in loaded.pending_calls})
