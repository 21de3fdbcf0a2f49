"""The data classes of state.py are written out by hand (issue 24: creating dataclasses cost
~0.5 ms each at import); they keep what the dataclasses gave their users."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from unbroken._plain import Plain
from unbroken.codec import Decoded
from unbroken.session import RunResult
from unbroken.state import Lease, LedgerEntry, RunState, RunSummary, Settlement, ToolCall, ToolResult


def test_equality_and_repr_are_a_dataclasses() -> None:
    result = ToolResult("toolu_1", "42")
    assert result == ToolResult("toolu_1", "42", False, "executed")
    assert result != ToolResult("toolu_1", "42", is_error=True)
    assert result != ("toolu_1", "42", False, "executed")  # another class is never equal
    assert repr(result) == "ToolResult(call_id='toolu_1', content='42', is_error=False, how='executed')"
    with pytest.raises(TypeError):
        hash(result)  # mutable: unhashable, as a dataclass that is not frozen


def test_frozen_classes_refuse_assignment_and_hash_by_value() -> None:
    lease = Lease("run-1", "host:1", 3, 10.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lease.fence = 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        del lease.owner
    assert hash(lease) == hash(Lease("run-1", "host:1", 3, 10.0)) and {lease: 1}[Lease("run-1", "host:1", 3, 10.0)]


def test_replace_fields_and_asdict_work_as_on_the_dataclasses() -> None:
    entry = LedgerEntry("run-1", "ub_k", "toolu_1", "send", "h", "pending", created_at=1.0, updated_at=2.0)
    done = dataclasses.replace(entry, status="succeeded", result=ToolResult("toolu_1", "ok"))
    assert (done.status, done.attempts, done.created_at) == ("succeeded", 1, 1.0) and entry.status == "pending"
    assert entry.replace(attempts=2) == dataclasses.replace(entry, attempts=2)
    assert [field.name for field in dataclasses.fields(ToolCall)] == ["id", "name", "input", "idempotency_key", "error"]
    assert dataclasses.asdict(done)["result"] == {
        "call_id": "toolu_1",
        "content": "ok",
        "is_error": False,
        "how": "executed",
    }
    assert dataclasses.is_dataclass(Settlement("c", "t", "ran"))
    with pytest.raises(TypeError):
        entry.replace(no_such_field=1)


def test_defaults_are_fresh_per_instance() -> None:
    one, two = RunState("run-1", "task"), RunState("run-2", "task")
    one.messages.append({"role": "user", "content": "hi"})
    one.usage["input_tokens"] = 1
    assert two.messages == [] and two.usage == {} and one.created_at > 0


def test_copies_pickles_and_patterns_keep_working() -> None:
    state = RunState("run-1", "task", pending_calls=[ToolCall("toolu_1", "send", {"to": "a"}, "ub_k")])
    summary = RunSummary("run-1", "task", "completed", 1, 10, 3, 5.0)
    assert copy.deepcopy(state) == state and pickle.loads(pickle.dumps(state)) == state
    assert copy.copy(summary) == summary and pickle.loads(pickle.dumps(summary)) == summary
    match ToolResult("toolu_1", "42"):
        case ToolResult(call_id, content, is_error=False):  # type: ignore[misc]  # (mypy: no literal __match_args__)
            assert (call_id, content) == ("toolu_1", "42")
        case _:
            pytest.fail("a positional pattern did not match")


def test_a_subclass_without_slots_keeps_its_bases_fields() -> None:
    class Noted(ToolResult):  # (a user's subclass, as of a dataclass: its annotations are not fields)
        note: str = "seen"

    noted = Noted("toolu_1", "42")
    assert noted.note == "seen"
    assert repr(noted).endswith(".Noted(call_id='toolu_1', content='42', is_error=False, how='executed')")
    assert noted.replace(content="43").content == "43" and type(noted.replace()) is Noted


def test_a_class_whose_slots_and_fields_differ_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="__slots__ must name exactly the annotated fields"):

        class Wrong(Plain):
            __slots__ = ("a",)
            a: int
            b: int


def test_fields_kept_out_of_repr_and_equality_stay_out() -> None:
    state = RunState("run-1", "task", messages=[{"role": "user", "content": "a long history"}])
    result = RunResult("run-1", "completed", "done", 1, 10, state=state)
    assert "history" not in repr(result) and result.state is state  # the whole history: not printed
    assert result != RunResult("run-1", "completed", "done", 1, 10)  # ... but still compared
    decoded = Decoded(state, 1, [])
    built = Decoded(state, 1, [], _timeline=[])
    assert decoded == built and "_timeline" not in repr(built)  # a cache: neither shown nor compared
