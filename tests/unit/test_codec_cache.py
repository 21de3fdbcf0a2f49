"""The encoder's caches of unchanged small fields never change a record.

The encoder keeps the text of each small field whose value is a str or a float (immutable) and
reuses it when the state holds the very same object again (``Encoder._known``); and it writes the
fields that rarely change (``codec._COLD``) in one orjson call, reusing their saved texts while
that call's text is the saved state's (``Encoder._saved_cold``). These tests run two encoders in
lockstep over random sequences of states (saves committed or lost, resumes priming new encoders):
one keeps its caches, the other forgets them before every save (a fresh encode of every field).
Every record must be the same bytes, and a fresh encoder must give the same field texts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from unbroken import NotJSONValue, RunState, codec
from unbroken.codec import Encoder
from unbroken.state import PHASES

_TEXTS = st.text(max_size=12)
_INTS = st.integers(min_value=0, max_value=2**40)
_NUMBERS = st.one_of(st.integers(min_value=0, max_value=2**40), st.floats(allow_nan=False, allow_infinity=False))
_LEAVES = st.one_of(st.none(), st.booleans(), _INTS, st.floats(allow_nan=False, allow_infinity=False), _TEXTS)

# One step: a field, and how its new value relates to the old one.
#   "same": the very same object again; "twin": an equal but distinct object (also of the other
#   numeric type: 1 == 1.0 but they are written differently); "new": another value.
_HOW = st.sampled_from(["same", "twin", "new"])
_STEPS = st.one_of(
    st.tuples(st.sampled_from(["task", "output", "error", "summary"]), _HOW, _TEXTS),
    st.tuples(st.sampled_from(["output", "error", "summary"]), st.just("none"), st.none()),
    st.tuples(st.just("phase"), st.sampled_from(["same", "twin", "new"]), st.sampled_from(PHASES)),
    st.tuples(
        st.sampled_from(["turns", "tokens_used", "business_state_version", "summary_upto"]),
        st.sampled_from(["same", "twin", "new"]),
        _INTS,
    ),
    st.tuples(st.sampled_from(["created_at", "updated_at"]), st.sampled_from(["same", "twin", "new"]), _NUMBERS),
    st.tuples(st.just("business_state"), st.just("in_place"), st.tuples(_TEXTS, _LEAVES)),
    st.tuples(st.just("usage"), st.just("in_place"), st.tuples(_TEXTS, _INTS)),
    st.tuples(st.just("messages"), st.just("append"), _TEXTS),
    st.tuples(st.just("save"), st.sampled_from(["committed", "lost"]), st.none()),
    st.tuples(st.just("resume"), st.just("prime"), st.none()),
)


def _twin(value: Any, retype: bool) -> Any:
    """An equal object that is not ``value`` (``retype``: of the other numeric type when one is
    equal, as 1 == 1.0, which are written differently)."""
    if type(value) is str:
        return "".join(list("\0" + value))[1:]
    if type(value) is int:
        return float(value) if retype and value < 2**53 else int(str(value))
    if type(value) is float:
        if value == 0:
            return -value  # 0.0 == -0.0, written "0.0" and "-0.0"
        return int(value) if retype and value.is_integer() and abs(value) < 2**53 else float(repr(value))
    return value


def _apply(state: RunState, field: str, how: str, value: Any) -> None:
    if how == "in_place":
        key, item = value
        getattr(state, field)[key] = item  # a tool changing business_state without telling anyone
    elif how == "append":
        state.messages.append({"role": "user", "content": value})
    elif how == "same":
        setattr(state, field, getattr(state, field))
    elif how == "twin":
        setattr(state, field, _twin(getattr(state, field), field in ("created_at", "updated_at")))
    else:
        setattr(state, field, value)


def _fresh_texts(state: RunState) -> dict[str, str]:
    return Encoder()._texts(state, None)[0]


@settings(max_examples=200, deadline=None)
@given(st.lists(_STEPS, min_size=1, max_size=40), st.integers(min_value=1, max_value=5))
@example(  # 0.0 == -0.0, written differently
    [
        ("updated_at", "new", 0.0),
        ("save", "committed", None),
        ("updated_at", "twin", None),
        ("save", "committed", None),
    ],
    3,
)
def test_a_record_is_the_same_bytes_with_and_without_the_cache(steps: list[Any], every: int) -> None:
    state = RunState(run_id="r", task="t", messages=[{"role": "user", "content": "t"}])
    cached, fresh = Encoder(every), Encoder(every)
    for field, how, value in steps:
        if field == "resume":  # a new process: encoders primed from the loaded state
            cached, fresh = Encoder(every), Encoder(every)
            cached.prime(state)
            fresh.prime(state)
            continue
        if field != "save":
            _apply(state, field, how, value)
            continue
        state.save_seq += 1
        fresh._known.clear()  # every field encoded anew
        fresh._saved_cold = None  # ... the cold fields too, one by one
        with_cache = cached.encode(state, "save")
        without = fresh.encode(state, "save")
        assert with_cache.body == without.body
        assert (with_cache.checksum, with_cache.snapshot) == (without.checksum, without.snapshot)
        assert cached._texts(state, None)[0] == _fresh_texts(state)
        if how == "committed":
            cached.committed(state, with_cache)
            fresh.committed(state, without)
        else:  # the store refused it: the next save must still be judged against the last committed one
            state.save_seq -= 1


def test_an_equal_number_written_differently_is_written_as_itself() -> None:
    """1 == 1.0 and 0.0 == -0.0: the cache matches by identity, never by equality."""
    state = RunState(run_id="r", task="t", messages=[])
    encoder = Encoder()
    for value, text in ((1, "1"), (1.0, "1.0"), (0.0, "0.0"), (-0.0, "-0.0"), (0, "0"), (0.0, "0.0")):
        state.updated_at = value
        assert encoder._texts(state, None)[0]["updated_at"] == text


def test_business_state_changed_in_place_is_written_and_checked() -> None:
    """Containers are never cached: an in-place change is written, and a bad value refused."""
    state = RunState(run_id="r", task="t", messages=[], business_state={"n": 1})
    encoder = Encoder()
    state.save_seq = 1
    encoder.committed(state, encoder.encode(state, "a"))
    state.business_state["n"] = 2
    state.save_seq = 2
    assert '"business_state":{"n":2}' in encoder.encode(state, "b").body
    state.business_state["t"] = (1, 2)
    with pytest.raises(NotJSONValue, match=r"business_state\.t"):
        encoder.encode(state, "c")


def test_the_hot_and_cold_fields_are_every_small_field() -> None:
    """Each small field is in exactly one group (a field in neither would never be written again
    once the cold group matched), save_seq and message_count being derived by the reader."""
    state = RunState(run_id="r", task="t", approvals={}, conversation={}, history_checked=1, resumes=1)
    fields = set(state.small_fields()) - {"save_seq", "message_count"}
    assert set(codec._HOT) | set(codec._COLD) == fields
    assert not set(codec._HOT) & set(codec._COLD)


def _committed(encoder: Encoder, state: RunState) -> str:
    state.save_seq += 1
    encoded = encoder.encode(state, "save")
    encoder.committed(state, encoded)
    assert isinstance(encoded.body, str)  # a plain record is text
    return encoded.body


def test_unchanged_cold_fields_are_not_encoded_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the cold group: a save whose cold fields are the saved state's encodes only
    the hot fields (``_hot_texts``), none through the field-by-field loop, and writes what
    changed, as before."""
    state = RunState(run_id="r", task="a long brief " * 100, messages=[])
    encoder = Encoder()
    _committed(encoder, state)
    encoded: list[str] = []
    real = Encoder._encode_fields

    def spy(self: Encoder, keys: Any, *args: Any) -> None:
        encoded.extend(keys)
        real(self, keys, *args)

    monkeypatch.setattr(Encoder, "_encode_fields", spy)
    state.turns, state.phase = 1, "running_tools"
    body = _committed(encoder, state)
    assert encoded == []
    assert body.endswith('"fields":{"turns":1,"phase":"running_tools"}}')
    encoded.clear()
    state.output = "done"  # a cold field changed: every field is encoded and compared
    assert '"output":"done"' in _committed(encoder, state)
    assert "task" in encoded and "output" in encoded


@pytest.mark.parametrize("field", ["output", "error", "provider"])
def test_a_nan_in_place_of_a_none_is_refused_though_both_are_written_null(field: str) -> None:
    """orjson writes NaN as null, as it writes None: the cold text alone would not change, so
    a null it holds must be one of the values being None, or the fields are encoded one by one
    (which refuses NaN)."""
    state = RunState(run_id="r", task="t", messages=[])
    setattr(state, field, None)
    encoder = Encoder()
    _committed(encoder, state)
    setattr(state, field, float("nan"))
    state.save_seq += 1
    with pytest.raises(NotJSONValue, match=field):
        encoder.encode(state, "save")


def test_a_nested_nan_where_a_none_was_is_refused() -> None:
    state = RunState(run_id="r", task="t", messages=[], business_state={"x": None})
    encoder = Encoder()
    _committed(encoder, state)
    state.business_state["x"] = float("inf")
    state.save_seq += 1
    with pytest.raises(NotJSONValue, match="business_state"):
        encoder.encode(state, "save")


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
@example(1e-05)
@example(1e16)
@example(-0.0)
def test_a_float_is_written_as_repr_writes_it(value: float) -> None:
    """The encoder writes floats with orjson where its text is repr's (from 1e-4 up), with repr
    below (orjson writes 1e-05 as 0.00001): the record bytes do not depend on which ran."""
    assert codec._float_text(value) == repr(value)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_hot_field_that_is_not_finite_is_refused(value: float) -> None:
    """The written-out hot fields (``_hot_texts``) refuse NaN and the infinities as the loop does."""
    state = RunState(run_id="r", task="t", messages=[])
    encoder = Encoder()
    _committed(encoder, state)
    state.updated_at = value
    state.save_seq += 1
    with pytest.raises(NotJSONValue, match="updated_at"):
        encoder.encode(state, "save")
