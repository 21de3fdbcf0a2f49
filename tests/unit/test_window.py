"""A compacted run resumes from its tail: the snapshot and the window, never the older history."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from unbroken import Agent, CorruptCheckpoint, ModelCallFailed, ScriptedModel, open_store, tool
from unbroken.codec import StoredRecord
from unbroken.compaction import Compactor
from unbroken.model import ModelTurn, ToolSpec
from unbroken.state import JSONValue
from unbroken.stores.base import Store
from unbroken.window import load_window

TURNS = 120


@tool(effect="read_only")
def lookup(n: int) -> str:
    """Look a number up."""
    return f"result {n} " + "x" * 400


def script(turns: int) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = [
        {"content": [{"type": "tool_use", "id": f"c{i}", "name": "lookup", "input": {"n": i}}], "usage": {}}
        for i in range(turns)
    ]
    return [*answers, {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}]


class Recorder(ScriptedModel):
    """Answers by a counter (the context it is sent is compacted), records what it was sent, and
    fails at answer ``fail_at`` (a crash while the model is asked)."""

    def __init__(self, responses: list[dict[str, Any]], fail_at: int | None = None) -> None:
        super().__init__(responses)
        self.sent: list[list[JSONValue]] = []
        self.answered = 0
        self.fail_at = fail_at

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        if self.answered == self.fail_at:
            raise RuntimeError("the process dies here")
        self.sent.append(list(messages))
        self.answered += 1
        return super().complete([{"role": "assistant"}] * (self.answered - 1), tools, system)


def compactor() -> Compactor:
    return Compactor(threshold_tokens=2_000, keep_recent_tokens=1_000, summarise=lambda prev, msgs: f"{len(msgs)}")


def compacted_run(turns: int = TURNS, fail_at: int | None = None) -> Store:
    store = open_store("memory://")
    agent = Agent(Recorder(script(turns), fail_at), [lookup], store, max_turns=turns + 1, compaction=compactor())
    with contextlib.suppress(ModelCallFailed):
        agent.run("count", run_id="r")
    return store


def test_a_compacted_run_loads_the_same_state_from_its_tail() -> None:
    store = compacted_run()
    whole = store.decode("r")
    tail = load_window(store, "r")
    assert 0 < tail.message_base <= whole.state.summary_upto
    assert tail.state.small_fields() == whole.state.small_fields()
    assert tail.state.messages[tail.message_base :] == whole.state.messages[tail.message_base :]
    assert tail.state.messages[: tail.message_base] == [None] * tail.message_base
    assert len(tail.records) < len(whole.records) // 2


def test_the_tail_load_reads_only_the_last_records(monkeypatch: pytest.MonkeyPatch) -> None:
    store = compacted_run()
    reads: list[int] = []
    real = store.backend.records_after

    def spy(run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        reads.append(after_seq)
        return real(run_id, after_seq)

    monkeypatch.setattr(store.backend, "records_after", spy)
    monkeypatch.setattr(store, "decode", lambda *a, **k: pytest.fail("the whole run was read"))
    load_window(store, "r")
    head = store.backend.read_head("r")
    # First the records from the newest snapshot on (they say whether and where it was
    # compacted), then, if the window starts earlier, the last 128.
    snapshot = store.newest_snapshot("r")
    assert head is not None and head.seq - 50 < snapshot <= head.seq
    assert reads[0] == snapshot - 1 and reads[1:] in ([], [head.seq - 128])


def test_a_long_run_never_compacted_parses_only_the_records_after_its_snapshot_before_the_whole_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = open_store("memory://")
    Agent(Recorder(script(150)), [lookup], store, max_turns=151).run("count", run_id="r")
    head = store.backend.read_head("r")
    assert head is not None and head.seq > 128
    reads: list[int] = []
    real = store.backend.records_after

    def spy(run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        reads.append(after_seq)
        return real(run_id, after_seq)

    monkeypatch.setattr(store.backend, "records_after", spy)
    tail = load_window(store, "r")
    assert reads == [store.newest_snapshot("r") - 1, 0] and head.seq - reads[0] <= 50  # then store.decode's read
    assert tail.message_base == 0 and tail.state == store.decode("r").state


def test_a_run_never_compacted_is_read_whole() -> None:
    store = open_store("memory://")
    Agent(Recorder(script(80)), [lookup], store, max_turns=81).run("count", run_id="r")
    tail = load_window(store, "r")
    assert tail.message_base == 0 and tail.state == store.load("r")


def test_damage_in_the_tail_is_judged_by_the_whole_run_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    store = compacted_run()
    real = store.backend.records_after

    def damaged(run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        records = real(run_id, after_seq)
        last = records[-1]
        body = last.body if isinstance(last.body, str) else last.body.decode()
        return [*records[:-1], StoredRecord(last.seq, body.replace('"r"', '"x"'), last.checksum)]

    monkeypatch.setattr(store.backend, "records_after", damaged)
    with pytest.raises(CorruptCheckpoint):
        load_window(store, "r")


def test_a_resumed_compacted_run_sends_the_summary_and_window_and_finishes() -> None:
    store = compacted_run(fail_at=100)
    assert store.load("r").turns == 100
    model = Recorder(script(TURNS))
    model.answered = 100
    agent = Agent(model, [lookup], store, max_turns=TURNS + 1, compaction=compactor())
    result = agent.run(run_id="r")
    assert result.status == "completed" and result.resumed
    assert result.state is not None and result.state.messages[0] is None  # resumed from the tail only
    first = model.sent[0]
    assert "<summary_of_earlier_work>" in str(first[0]) and None not in first
    final = store.load("r")
    assert final.turns == TURNS + 1 and None not in final.messages
    assert final.messages[-1] == {"role": "assistant", "content": [{"type": "text", "text": "done"}]}
