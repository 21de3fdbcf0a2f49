"""`recover` on a damaged run: explicit, keeps the originals aside and tells the model which side
effects already happened. (Damage detection itself, on every store, is in the StoreContract.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from click.testing import CliRunner

from unbroken.cli import main
from unbroken.codec import encode_full
from unbroken.ops import recover
from unbroken.state import ToolCall, ToolResult, idempotency_key
from unbroken.stores import open_store
from unbroken.stores.base import Store
from unbroken.testing.contract import RunWriter, ledger_entry


def five_saves(store: Store) -> RunWriter:
    run = RunWriter(store, "r")
    for step in range(1, 6):
        run.turn(step)
    return run


def delete_sqlite_record(path: Path, seq: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM unbroken_records WHERE run_id='r' AND seq=?", (seq,))
    conn.close()


def test_recover_keeps_the_originals_aside_and_tells_the_model_what_already_happened(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run = RunWriter(store, "r")
    for step in range(1, 3):
        run.turn(step)
    sent = ledger_entry(
        "r",
        "call_sent",
        tool="send_email",
        status="succeeded",
        result=ToolResult("call_sent", "sent to ann", False),
        created_at=run.state.updated_at + 0.5,  # after save 2, before save 3
    )
    store.ledger_put(sent)
    for step in range(3, 6):
        run.turn(step)
    delete_sqlite_record(tmp_path / "runs.db", 3)
    originals = store.read_records("r")

    done = recover(store, "r")

    assert done.recovered_from == 2
    assert [r.body for r in store.read_records(done.kept_aside)] == [r.body for r in originals]
    state = store.load("r")
    assert state.save_seq == 6 and state.turns == 2
    assert "send_email" in state.messages[-1]["content"] and "do not repeat" in state.messages[-1]["content"]
    assert store.ledger_get("r", sent.key) == sent


def test_unbroken_recover_command_continues_a_damaged_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    five_saves(open_store(url))
    delete_sqlite_record(tmp_path / "runs.db", 4)

    result = CliRunner().invoke(main, ["recover", "r", "--store", url])

    assert result.exit_code == 0, result.output
    assert "continues from save point 3" in result.output and "r.damaged-5" in result.output
    assert open_store(url).load("r").turns == 3


def test_recover_tells_side_effects_apart_by_the_calls_the_records_name_not_by_the_clock(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run = RunWriter(store, "r")
    run.turn(1)
    before, after = (ToolCall(call_id, "send_email", {}, idempotency_key("r", call_id)) for call_id in ("c1", "c2"))
    run.state.pending_calls = [before]
    run.save("model_turn")  # save 2 records call c1
    store.ledger_put(ledger_entry("r", "c1", status="succeeded", created_at=9e9))  # a clock far ahead
    run.state.pending_calls = []
    run.turn(3)  # save 3: the recovery point
    run.state.pending_calls = [after]
    run.save("model_turn")  # save 4 records call c2
    store.ledger_put(ledger_entry("r", "c2", status="succeeded", created_at=1.0))  # a clock far behind
    run.state.pending_calls = []
    run.turn(5)
    delete_sqlite_record(tmp_path / "runs.db", 4)

    done = recover(store, "r")

    assert done.recovered_from == 3
    assert done.told == [after.idempotency_key]
    assert "call c2" in store.load("r").messages[-1]["content"]
    assert "call c1" not in store.load("r").messages[-1]["content"]


def test_recover_of_a_compacted_run_does_not_name_side_effects_from_before_its_snapshot(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run = RunWriter(store, "r")
    for step in range(1, 4):
        run.turn(step)
    store.ledger_put(ledger_entry("r", "c_old", status="succeeded", created_at=run.state.updated_at))
    state = store.load("r")
    state.save_seq, state.updated_at = 4, run.state.updated_at + 1.0
    store.rewrite("r", [encode_full(state, "compacted")], expect_seq=3)  # no record names c_old now
    run.state = state
    run.encoder.prime(state)
    run.turn(5)  # the recovery point
    later = ToolCall("c_new", "send_email", {}, idempotency_key("r", "c_new"))
    run.state.pending_calls = [later]
    run.save("model_turn")
    store.ledger_put(ledger_entry("r", "c_new", status="succeeded", created_at=run.state.updated_at + 0.5))
    run.state.pending_calls = []
    run.turn(7)
    delete_sqlite_record(tmp_path / "runs.db", 6)

    done = recover(store, "r")

    assert done.recovered_from == 5
    assert done.told == [later.idempotency_key]
