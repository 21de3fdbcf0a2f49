"""One record schema, the same at write and at read (issue 21 items 5 and 8).

A save is acknowledged only if every load accepts it: a model's odd usage is normalised before
it reaches the state, and a state a load would refuse is refused before it is written. The fast
and careful paths of ``acceptance`` (and the typed segment parse) agree on every input."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest
from core_scripts import final_turn, reading_script
from hypothesis import example, given, settings
from hypothesis import strategies as st

from unbroken import (
    SCHEMA_VERSION,
    Agent,
    CorruptCheckpoint,
    IncompatibleSchema,
    ModelTurn,
    NotJSONValue,
    RunState,
    ScriptedModel,
    Store,
    ToolCall,
    UnloadableState,
    acceptance,
    codec,
    open_store,
    paging,
    segment_read,
    tool,
    usage,
)
from unbroken.codec import Segment
from unbroken.model import ToolSpec
from unbroken.state import JSONValue, ToolResult


@tool(effect="read_only")
def read_ticket(ticket_id: str) -> str:
    return f"ticket {ticket_id}"


ODD_USAGES: list[Any] = [
    {"input_tokens": "lots", "output_tokens": -5},
    {"input_tokens": None, "output_tokens": None},
    {"input_tokens": 2**70, "output_tokens": 3},
    {"input_tokens": -(2**70)},
    {"input_tokens": 1.5, "output_tokens": True},
    {"input_tokens": math.nan, "output_tokens": math.inf},
    {"details": {"x": -1, "cached_tokens": "many", "deeper": {"a": {"b": {"c": {"d": {"e": {"f": {"g": 1}}}}}}}}},
    {"server_tool_use": [{"web_search_requests": 2**64}], "service_tier": "standard"},
    "many",
    7,
    None,
    [],
]


def script_with_usage(odd: Any, *, present: bool = True) -> list[dict[str, Any]]:
    turns = reading_script(1)
    if present:
        turns[0]["usage"] = odd
    else:
        del turns[0]["usage"]
    turns[1]["usage"] = {"input_tokens": 100, "output_tokens": 20}
    return turns


@pytest.mark.parametrize("odd", ODD_USAGES, ids=repr)
def test_odd_usage_from_the_model_is_normalised_and_the_run_loads(
    sqlite_store: Store, odd: Any, caplog: pytest.LogCaptureFixture
) -> None:
    agent = Agent(model=ScriptedModel(script_with_usage(odd)), tools=[read_ticket], store=sqlite_store)
    with caplog.at_level(logging.WARNING, logger="unbroken"):
        result = agent.run("t", run_id="r")
    assert result.status == "completed"
    loaded = sqlite_store.load("r")  # resume, show and history all read through the same acceptance
    assert paging.read_tail(sqlite_store, "r").state.tokens_used == loaded.tokens_used
    assert len(sqlite_store.history("r")) == loaded.save_seq
    assert 120 <= loaded.tokens_used < 2**53
    assert loaded.usage["input_tokens"] >= 100 and loaded.usage["output_tokens"] >= 20
    orjson.dumps(loaded.usage)  # plain JSON, within every reader's limits
    if odd not in (None, {"input_tokens": None, "output_tokens": None}):
        assert loaded.usage[usage.DROPPED] >= 1
        assert "model usage: dropped" in caplog.text


def test_a_missing_usage_is_no_usage_and_no_note(sqlite_store: Store) -> None:
    agent = Agent(model=ScriptedModel(script_with_usage(None, present=False)), tools=[read_ticket], store=sqlite_store)
    agent.run("t", run_id="r")
    assert sqlite_store.load("r").usage == {"input_tokens": 100, "output_tokens": 20}


def test_usage_keeps_every_count_and_drops_only_what_no_count_can_be() -> None:
    cleaned, notes = usage.clean_usage(
        {"input_tokens": 10, "cost": 0.25, "tier": "std", "output_tokens": -1, "details": {"cached_tokens": "x"}}
    )
    assert cleaned == {"input_tokens": 10, "cost": 0.25, "tier": "std", "details": {}}
    assert notes == [
        "usage.output_tokens: -1 is not a count from 0 to 2**53-1",
        "usage.details.cached_tokens: 'x' is not a count",
    ]


def test_sums_of_usage_stop_at_the_largest_count() -> None:
    total = usage.add_usage({"input_tokens": 2**53 - 10}, {"input_tokens": 2**53 - 10})
    assert total == {"input_tokens": 2**53 - 1}


class TokenModel(ScriptedModel):
    """A model of one's own whose ``tokens`` is whatever it says."""

    def __init__(self, tokens: object) -> None:
        super().__init__([final_turn()])
        self.tokens = tokens

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        turn = super().complete(messages, tools, system)
        turn.tokens = self.tokens  # type: ignore[assignment]
        return turn


@pytest.mark.parametrize(("tokens", "counted"), [(-5, 0), (2**70, 0), ("lots", 0), (True, 0), (3.0, 3), (None, 0)])
def test_a_token_count_that_is_no_count_is_not_counted(sqlite_store: Store, tokens: object, counted: int) -> None:
    Agent(model=TokenModel(tokens), tools=[], store=sqlite_store).run("t", run_id="r")
    loaded = sqlite_store.load("r")
    assert loaded.tokens_used == counted
    assert (usage.DROPPED in loaded.usage) is (counted == 0)


def naive_account_turn(tokens_used: int, total: dict[str, Any], tokens: object, turn_usage: object) -> tuple[int, Any]:
    """Usage taken as the model gave it (the normalisation switched off)."""
    return tokens_used + tokens, {**total, **(turn_usage if isinstance(turn_usage, dict) else {})}  # type: ignore[operator]


@pytest.mark.parametrize("tokens", [-5, 2**60])
def test_a_save_that_no_load_would_accept_is_refused_before_it_is_written(
    sqlite_store: Store, tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usage, "account_turn", naive_account_turn)
    agent = Agent(model=TokenModel(tokens), tools=[], store=sqlite_store)
    with pytest.raises(UnloadableState, match=r"field tokens_used is .*, not an integer from 0 to 2\*\*53-1"):
        agent.run("t", run_id="r")
    loaded = sqlite_store.load("r")  # the run stays at its last save point, which loads
    assert loaded.save_seq == 1 and loaded.phase == "awaiting_model"


# --------------------------------------------------------------------------- the fast and careful paths agree

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=3)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)


def valid_record(seq: int) -> dict[str, Any]:
    return {"v": SCHEMA_VERSION, "seq": seq, "label": "x", "msg_start": 0, "messages": [], "fields": {}}


def fits(record: dict[str, Any], seq: int) -> bool:
    """The record rule, read off ``RECORD_SHAPE`` by this test."""
    for key, kind, required in acceptance.RECORD_SHAPE:
        if key not in record:
            if required:
                return False
        elif type(record[key]) is not kind:
            return False
    return bool(record["seq"] == seq and record["v"] <= SCHEMA_VERSION)


@settings(max_examples=150, deadline=None)
@example(changes={"seq": None, "v": SCHEMA_VERSION + 1}, dropped=set())  # found by a random draw: a newer record
@given(
    changes=st.dictionaries(
        st.sampled_from([key for key, _, _ in acceptance.RECORD_SHAPE]), st.none() | JSON_VALUES, max_size=3
    ),
    dropped=st.sets(st.sampled_from([key for key, _, _ in acceptance.RECORD_SHAPE]), max_size=2),
)
def test_accept_and_the_typed_segment_parse_agree_with_the_record_shape(
    changes: dict[str, Any], dropped: set[str]
) -> None:
    record = valid_record(1)
    record.update(changes)
    for key in dropped:
        record.pop(key, None)
    if type(record.get("v")) is int and record["v"] > SCHEMA_VERSION:
        # A newer writer's record is refused as such whatever else it holds (its shape may be newer too):
        # the user is told to upgrade unbroken, not that the record is damaged.
        with pytest.raises(IncompatibleSchema):
            acceptance.accept_parsed(record, 1, SCHEMA_VERSION)
        return
    body = orjson.dumps(record)
    expected = fits(record, 1) if type(record.get("seq")) is int and type(record.get("v")) is int else False
    judges: list[Callable[[], object]] = [
        lambda: acceptance.accept_parsed(record, 1, SCHEMA_VERSION),
        lambda: acceptance.accept(1, body, acceptance.checksum(body), SCHEMA_VERSION),
    ]
    for judge in judges:
        try:
            judge()
        except ValueError as exc:
            assert not expected, exc
            assert str(exc) and "unreachable" not in str(exc)
        else:
            assert expected
    typed = acceptance.accept_segment(b"[" + body + b"]")
    if type(record.get("fields")) is not dict and "fields" in record and fits({**record, "fields": {}}, 1):
        return  # a sealed segment's fields are raw text until the fold reads them (and checks they are an object)
    # The typed parse judges the shape only: a segment's seqs and schema version are checked by its
    # reader (``segment_read.records_of``: the records are the segment's seqs in order, one version).
    shaped = type(record.get("seq")) is int and type(record.get("v")) is int and fits(record, record["seq"])
    assert (typed is not None) is shaped


@settings(max_examples=200, deadline=None)
@given(
    at=st.integers(0, 2),
    changes=st.dictionaries(
        st.sampled_from([key for key, _, _ in acceptance.RECORD_SHAPE]),
        st.none() | JSON_VALUES | st.integers(0, 5),
        max_size=3,
    ),
    dropped=st.sets(st.sampled_from([key for key, _, _ in acceptance.RECORD_SHAPE]), max_size=2),
    version=st.integers(1, SCHEMA_VERSION),
    not_a_dict=st.booleans(),
)
def test_a_segments_records_are_judged_in_one_loop_as_each_alone(
    at: int, changes: dict[str, Any], dropped: set[str], version: int, not_a_dict: bool
) -> None:
    """``intact_run`` (a sealed segment's records, in one loop) says what ``intact`` says of
    each record at its seq, with every record at the segment's one schema version."""
    values: list[Any] = [{**valid_record(seq), "v": version} for seq in (4, 5, 6)]
    values[at].update(changes)
    for key in dropped:
        values[at].pop(key, None)
    if not_a_dict:
        values[at] = list(values[at])
    each = all(
        acceptance.intact(value, seq, SCHEMA_VERSION) and value["v"] == version for seq, value in enumerate(values, 4)
    )
    assert acceptance.intact_run(values, 4, version) is each


@pytest.mark.parametrize(
    ("seqs", "versions", "read"), [((1, 2), (2, 2), True), ((1, 3), (2, 2), False), ((1, 2), (2, 3), False)]
)
def test_a_segment_is_read_only_when_its_records_are_its_seqs_in_order_at_one_version(
    seqs: tuple[int, int], versions: tuple[int, int], read: bool
) -> None:
    """What the typed parse leaves to the segment's reader: the seqs and the schema version."""
    bodies = (
        b"["
        + b",".join(orjson.dumps({**valid_record(seq), "v": v}) for seq, v in zip(seqs, versions, strict=True))
        + b"]"
    )
    index = b"[]"
    segment = Segment(1, 2, index, bodies, segment_read.seal(index, bodies))
    assert acceptance.accept_segment(bodies) is not None  # the shape alone holds every time
    assert (segment_read.records_of(segment, 1, SCHEMA_VERSION, acceptance.RunRecords("r")) is not None) is read


def valid_fields() -> dict[str, JSONValue]:
    state = RunState(
        run_id="r",
        task="t",
        messages=["m"],
        usage={"input_tokens": 1},
        pending_calls=[ToolCall("a", "n", {"x": 1}, "k1"), ToolCall("a", "n", {}, "k2", error="no")],
        results={"k1": ToolResult("a", "done", how="probed")},
        resolutions={"k2": "not_executed"},
        attempts={"k1": 2},
        history_checked=1,
    )
    return state.small_fields()


FIELD_NAMES = sorted({*valid_fields(), "summary"})


@settings(max_examples=200, deadline=None)
@given(
    changes=st.dictionaries(
        st.sampled_from(FIELD_NAMES),
        JSON_VALUES | st.integers(-(2**70), 2**70) | st.sampled_from(["completed"]),
        max_size=2,
    ),
    dropped=st.sets(st.sampled_from(FIELD_NAMES), max_size=1),
    call_change=st.none()
    | st.tuples(st.sampled_from(["id", "name", "input", "idempotency_key", "error"]), JSON_VALUES),
    per_call_change=st.none()
    | st.tuples(
        st.sampled_from(["call_id", "content", "is_error", "how", "resolution", "attempts"]),
        JSON_VALUES | st.integers(-(2**70), 2**70) | st.sampled_from(["skipped"]),
    ),
)
def test_the_fields_fast_path_agrees_with_the_careful_one(
    changes: dict[str, Any],
    dropped: set[str],
    call_change: tuple[str, Any] | None,
    per_call_change: tuple[str, Any] | None,
) -> None:
    fields = valid_fields()
    if call_change is not None:
        calls: Any = fields["pending_calls"]
        calls[0][call_change[0]] = call_change[1]
    if per_call_change is not None:
        name, value = per_call_change
        table: Any = fields["resolutions" if name == "resolution" else "attempts" if name == "attempts" else "results"]
        if name in ("resolution", "attempts"):
            table["k2" if name == "resolution" else "k1"] = value
        else:
            table["k1"][name] = value
    fields.update(changes)
    for key in dropped:
        del fields[key]
    fast = acceptance._fields_intact(fields)
    try:
        acceptance._explain_fields(fields)
    except ValueError:
        careful = False
    else:
        careful = True
    assert fast is careful
    if not fast:
        with pytest.raises(ValueError, match="field"):
            acceptance.accept_fields(fields)


def test_two_pending_calls_under_one_idempotency_key_are_refused() -> None:
    fields = valid_fields()
    calls: Any = fields["pending_calls"]
    calls[1]["idempotency_key"] = "k1"
    with pytest.raises(ValueError, match=r"pending_calls\[1\]\.idempotency_key 'k1' is already another call's"):
        acceptance.accept_fields(fields)


def test_text_that_is_not_unicode_is_refused_before_it_is_written(sqlite_store: Store) -> None:
    agent = Agent(model=ScriptedModel([final_turn()]), tools=[], store=sqlite_store)
    with pytest.raises(NotJSONValue, match=r"messages\[0\]: it cannot be encoded \(str is not valid UTF-8"):
        agent.run("refund \ud800", run_id="r")  # the task is the first message too
    assert not sqlite_store.exists("r")
    state = RunState(run_id="r", task="refund \ud800")  # a str field alone
    with pytest.raises(UnloadableState, match="not Unicode"):
        codec.encode_full(state, "start")


BAD_PER_CALL_SHAPES = [
    ("results", {"k1": "done"}, r"field results\['k1'\] is 'done', not an object"),
    (
        "results",
        {"k1": {"call_id": 7, "content": "x", "is_error": False}},
        r"results\['k1'\]\.call_id is 7, not a string",
    ),
    ("results", {"k1": {"call_id": "a", "content": ["x"], "is_error": False}}, r"results\['k1'\]\.content is \['x'\]"),
    (
        "results",
        {"k1": {"call_id": "a", "content": "x", "is_error": "no"}},
        r"results\['k1'\]\.is_error is 'no', not a boolean",
    ),
    (
        "results",
        {"k1": {"call_id": "a", "content": "x", "is_error": False, "how": "guessed"}},
        r"results\['k1'\]\.how is 'guessed'",
    ),
    (
        "results",
        {"k1": {"call_id": "a", "content": "x", "is_error": False, "how": ["x"]}},
        r"results\['k1'\]\.how is \['x'\]",
    ),
    ("resolutions", {"k1": 1}, r"field resolutions\['k1'\] is 1, not a string"),
    ("resolutions", ["not_executed"], r"field resolutions is a array, not a object"),
    ("attempts", {"k1": -1}, r"field attempts\['k1'\] is -1, not an integer from 0 to 2\*\*53-1"),
    ("attempts", {"k1": "2"}, r"field attempts\['k1'\] is '2'"),
    ("attempts", {"k1": 2**53}, r"field attempts\['k1'\] is 9007199254740992"),
    ("attempts", {"k1": True}, r"field attempts\['k1'\] is True"),
    ("summary", 5, r"field summary is 5, not a string or null"),
    ("summary", ["earlier turns"], r"field summary is \['earlier turns'\], not a string or null"),
]


def _saved_with_a_result(store: Store) -> codec.EncodedSave:
    state = RunState(
        run_id="r",
        task="t",
        messages=["m"],
        phase="running_tools",
        pending_calls=[ToolCall("a", "n", {}, "k1")],
        results={"k1": ToolResult("a", "done")},
        save_seq=1,
    )
    save = codec.encode_full(state, "start")
    store.append(save, expect_seq=0)
    return save


@pytest.mark.parametrize(("name", "value", "message"), BAD_PER_CALL_SHAPES)
def test_a_hand_edited_per_call_field_of_a_bad_shape_is_corrupt_naming_the_field_and_the_save(
    name: str, value: Any, message: str
) -> None:
    store = open_store("memory://")
    save = _saved_with_a_result(store)
    record = json.loads(save.body)
    record["fields"][name] = value
    body = json.dumps(record)
    store.rewrite("r", [dataclasses.replace(save, body=body, checksum=codec.checksum(body))], expect_seq=1)

    with pytest.raises(CorruptCheckpoint, match=message) as refused:
        store.load("r")

    assert "at save 1" in str(refused.value)


@pytest.mark.parametrize(("name", "value", "message"), BAD_PER_CALL_SHAPES)
def test_a_per_call_field_of_a_bad_shape_is_refused_before_it_is_written(name: str, value: Any, message: str) -> None:
    store = open_store("memory://")
    _saved_with_a_result(store)
    state = store.load("r")
    state.save_seq = 2
    fields: Any = state.small_fields()
    fields[name] = value  # as a tool or a hook that wrote into the state would leave it
    with pytest.raises(UnloadableState, match=message):
        codec.accept_before_save(fields, state)


@pytest.mark.parametrize(
    ("number", "read_as"), [(b"18446744073709551616", float(2**64)), (b"-9223372036854775809", float(-(2**63) - 1))]
)
def test_an_integer_beyond_64_bits_in_a_record_reads_as_the_one_json_parser_reads_it(
    number: bytes, read_as: float
) -> None:
    """unbroken never writes such a number (its encoder refuses it), but an edited record with a
    valid checksum may hold one: the loader reads it as ``acceptance.loads`` does (orjson: a
    float). Pinned for any faster record parse: a typed msgspec decode keeps it an exact int
    (docs/benchmarks.md, "PostgreSQL resume, 2026-12-02"), so it cannot replace this one as is."""
    body = b'{"v":2,"seq":1,"label":"x","msg_start":0,"messages":[' + number + b'],"fields":{}}'
    value = acceptance.accept(1, body, acceptance.checksum(body), SCHEMA_VERSION)
    assert value["messages"] == [read_as]
    assert type(value["messages"][0]) is float


def test_an_integer_of_400_digits_in_a_record_is_refused_as_not_json() -> None:
    body = b'{"v":2,"seq":1,"label":"x","msg_start":0,"messages":[' + b"1" * 400 + b'],"fields":{}}'
    with pytest.raises(ValueError, match="record is not JSON"):
        acceptance.accept(1, body, acceptance.checksum(body), SCHEMA_VERSION)
