"""Bad input gets a clear error and loses nothing (issue: core, item 10)."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest
from core_scripts import final_turn, reading_script, tool_turn

from unbroken import (
    SCHEMA_VERSION,
    Agent,
    CorruptCheckpoint,
    IncompatibleSchema,
    InvalidRunId,
    InvalidStoreURL,
    NotJSONValue,
    RunNotFound,
    ScriptedModel,
    Store,
    StoreUnavailable,
    open_store,
    tool,
)


@tool(effect="read_only")
def read_ticket(ticket_id: str) -> str:
    return f"ticket {ticket_id}"


def finished_run(store: Store, run_id: str = "r", turns: int = 3) -> None:
    Agent(model=ScriptedModel(reading_script(turns)), tools=[read_ticket], store=store).run("t", run_id=run_id)


@pytest.mark.parametrize(
    ("business_state", "path"),
    [
        ({"db": {"conn": object()}}, "business_state.db.conn"),
        ({"ratio": math.nan}, "business_state.ratio"),
        ({"blob": b"\x00\x01"}, "business_state.blob"),
        ({"pair": (1, 2)}, "business_state.pair"),
        ({"items": [1, {"when": math.inf}]}, "business_state.items[1].when"),
        ({1: "int key"}, "business_state[1]"),
    ],
)
def test_non_json_business_state_is_refused_naming_its_path(
    store: Store, business_state: dict[Any, Any], path: str
) -> None:
    agent = Agent(model=ScriptedModel(reading_script(1)), tools=[read_ticket], store=store)
    with pytest.raises(NotJSONValue) as caught:
        agent.run("t", run_id="r", business_state=business_state)
    assert caught.value.path == path
    assert path in str(caught.value) and "descriptor" in str(caught.value)
    with pytest.raises(RunNotFound):
        store.load("r")


def test_a_tool_that_puts_a_live_object_in_state_fails_that_call_once_and_keeps_the_state(store: Store) -> None:
    # Issue 21 item 7: the tool's own mistake fails its call with the clear error, once; it is
    # not a crash (the run used to stop there and each resume ran the tool again, to the cap).
    started: list[str] = []

    @tool(effect="side_effect")
    def connect(*, state: dict[str, Any]) -> str:
        started.append("connect")
        state["db"] = {"conn": object()}
        state["fine"] = 1
        return "connected"

    script = [tool_turn(("t1", "connect", {})), final_turn()]
    result = Agent(model=ScriptedModel(script), tools=[connect], store=store).run("t", run_id="r")
    assert result.status == "completed" and started == ["connect"]
    state = store.load("r")
    assert state.business_state == {}  # nothing of the refused change is kept
    (answer,) = [b for m in state.messages if m["role"] == "user" for b in m["content"] if isinstance(b, dict)]
    assert answer["is_error"] is True
    assert "business_state.db.conn" in answer["content"] and "connected" in answer["content"]
    (entry,) = store.ledger_list("r")
    assert (entry.status, entry.attempts) == ("failed", 1)


@pytest.mark.parametrize("run_id", ["../x", "/etc/passwd", "", "a\x00b", "x" * 201, "a/b", ".hidden", "-flag", "é"])
def test_unsafe_run_ids_are_refused(store: Store, run_id: str) -> None:
    agent = Agent(model=ScriptedModel(reading_script(1)), tools=[read_ticket], store=store)
    with pytest.raises(InvalidRunId):
        agent.run("t", run_id=run_id)
    with pytest.raises(InvalidRunId):
        store.load(run_id)


def test_the_longest_safe_run_id_is_accepted(store: Store) -> None:
    finished_run(store, run_id="a" * 200, turns=1)
    assert store.load("a" * 200).phase == "completed"


@pytest.mark.parametrize(
    "url",
    [
        "runs.db",
        "sqlite://",
        "sqlite://host/runs.db",
        "sqlite:///runs.db?durability=sometimes",
        "sqlite:///runs.db?color=blue",
        "mysql://localhost/db",
        "file://",
        "mongodb://127.0.0.1",
    ],
)
def test_a_wrong_store_url_says_what_would_work(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidStoreURL) as caught:
        open_store(url)
    assert "sqlite:///" in str(caught.value) or "durability" in str(caught.value)


def test_a_store_in_a_directory_that_cannot_exist_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreUnavailable, match="does not exist"):
        open_store(f"sqlite:///{blocker / 'runs.db'}")


def test_a_store_in_a_read_only_directory_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    real_access = os.access
    target = tmp_path / "ro"
    target.mkdir()
    # Root ignores permission bits, so model a read-only directory at the access check.
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == target else real_access(p, mode))
    with pytest.raises(StoreUnavailable, match="not writable"):
        open_store(f"sqlite:///{target / 'runs.db'}")


def test_a_file_that_is_not_a_database_is_reported(tmp_path: Path) -> None:
    garbage = tmp_path / "runs.db"
    garbage.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreUnavailable, match="not a database"):
        open_store(f"sqlite:///{garbage}")


def _tamper(path: Path, run_id: str, seq: int, body: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE unbroken_records SET body=? WHERE run_id=? AND seq=?", (body, run_id, seq))


def test_a_garbage_record_is_detected_and_the_run_refuses_to_resume_until_recovered(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = open_store(f"sqlite:///{path}")
    model = ScriptedModel(reading_script(3))
    agent = Agent(model=model, tools=[read_ticket], store=store)
    finished_run(store, turns=3)
    history = store.history("r")
    _tamper(path, "r", 5, '{"garbage": true}')
    with pytest.raises(CorruptCheckpoint, match="save record 5") as caught:
        store.load("r")
    assert caught.value.last_good_seq == 4
    recovered = store.load("r", recover=True)
    assert recovered.save_seq == 4 and recovered.phase == history[3].phase
    with pytest.raises(CorruptCheckpoint, match="save record 5"):  # resuming never repairs silently
        agent.run("t", run_id="r")
    assert [r.seq for r in store.read_records("r")][-1] == history[-1].seq  # nothing deleted


def test_a_truncated_record_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = open_store(f"sqlite:///{path}")
    finished_run(store, turns=2)
    body = cast(str, store.read_records("r")[-1].body)  # read_records hands back text
    _tamper(path, "r", store.read_records("r")[-1].seq, body[: len(body) // 2])
    with pytest.raises(CorruptCheckpoint):
        store.load("r")
    assert store.load("r", recover=True).phase == "awaiting_model"


def test_a_checkpoint_from_a_future_version_is_refused_and_left_alone(tmp_path: Path) -> None:
    from unbroken.codec import checksum

    path = tmp_path / "runs.db"
    store = open_store(f"sqlite:///{path}")
    finished_run(store, turns=1)
    last = store.read_records("r")[-1]
    future = cast(str, last.body).replace(f'"v":{SCHEMA_VERSION}', '"v":99', 1)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE unbroken_records SET body=?, checksum=? WHERE run_id='r' AND seq=?",
            (future, checksum(future), last.seq),
        )
    with pytest.raises(IncompatibleSchema, match="schema 99"):
        store.load("r")
    with pytest.raises(IncompatibleSchema):
        Agent(model=ScriptedModel(reading_script(1)), tools=[read_ticket], store=store).run("t", run_id="r")
    assert store.read_records("r")[-1].body == future


def test_an_empty_or_missing_run_is_not_found(store: Store) -> None:
    with pytest.raises(RunNotFound, match="no run 'ghost'"):
        store.load("ghost")
