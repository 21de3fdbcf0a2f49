"""`unbroken history` pages (`--last`, `--from`, `--all`), `unbroken export` streams the same bytes
as the whole-run document, and both report damage as the whole-run readers do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_helpers import Invoke, Place

from unbroken import ScriptedModel, open_store, ops
from unbroken.codec import EncodedSave, loads, summary_of
from unbroken.runner import Agent
from unbroken.stores.base import Store
from unbroken.tools import tool

TURNS = 60


@tool(effect="read_only")
def lookup(n: int) -> str:
    """Look a number up."""
    return f"result {n}"


def long_run(store: Store) -> None:
    answers: list[dict[str, Any]] = [
        {"content": [{"type": "tool_use", "id": f"c{i}", "name": "lookup", "input": {"n": i}}], "usage": {}}
        for i in range(TURNS)
    ]
    answers.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}})
    Agent(ScriptedModel(answers), [lookup], store, max_turns=TURNS + 1).run("count", run_id="long")


def damage(store: Store, seq: int) -> None:
    """Flip the stored checksum of save record ``seq`` of run 'long'."""
    records = store.read_records("long")
    summary = summary_of(store.decode("long").state)
    saves = []
    for record in records:
        body = record.body if isinstance(record.body, str) else record.body.decode()
        check = "00000000" if record.seq == seq else record.checksum
        saves.append(EncodedSave("long", record.seq, "x", body, check, loads(body).get("snapshot") is True, summary))
    store.backend.replace_records("long", saves, expect_seq=records[-1].seq, fence=None)


def table_seqs(output: str) -> list[int]:
    return [int(line.split()[1]) for line in output.splitlines() if line.startswith("│")]


def test_history_shows_the_last_50_by_default_and_pages_with_from_and_all(place: Place, invoke: Invoke) -> None:
    with open_store(place.url) as store:
        long_run(store)
        every = [info.seq for info in store.history("long")]
    head = every[-1]
    result = invoke("history", "long", "--store", place.url)
    assert result.exit_code == 0, result.output
    assert table_seqs(result.stdout) == every[-50:]
    assert f"save points {head - 49}..{head} of {head}" in result.stdout and "--all" in result.stdout
    result = invoke("history", "long", "--from", "10", "--last", "5", "--store", place.url)
    assert table_seqs(result.stdout) == [10, 11, 12, 13, 14]
    result = invoke("history", "long", "--from", str(head + 1), "--store", place.url)
    assert result.exit_code == 2 and f"has save points 1..{head}; there is nothing from {head + 1} on" in result.output
    result = invoke("history", "long", "--tail", "3", "--store", place.url)
    assert table_seqs(result.stdout) == every[-3:]
    result = invoke("history", "long", "--all", "--store", place.url)
    assert result.exit_code == 0, result.output
    assert table_seqs(result.stdout) == every


def test_history_reports_damage_in_what_it_reads(place: Place, invoke: Invoke) -> None:
    with open_store(place.url) as store:
        long_run(store)
        head = store.history("long")[-1].seq
        damage(store, 3)
    newest = invoke("history", "long", "--store", place.url)  # the last 50 do not read record 3
    assert newest.exit_code == 0 and "warning" not in newest.stdout
    assert table_seqs(newest.stdout) == list(range(head - 49, head + 1))
    whole = invoke("history", "long", "--all", "--store", place.url)
    assert whole.exit_code == 0, whole.output
    assert table_seqs(whole.stdout) == [1, 2]
    assert "save record 3 of run 'long' is damaged" in " ".join(whole.stdout.split())
    early = invoke("history", "long", "--from", "1", "--store", place.url)
    assert table_seqs(early.stdout) == [1, 2] and "save record 3" in " ".join(early.stdout.split())


def test_export_streams_the_whole_documents_bytes(place: Place, invoke: Invoke, tmp_path: Path) -> None:
    with open_store(place.url) as store:
        long_run(store)
        document = ops.export_run(store, "long")
    result = invoke("export", "long", "--store", place.url)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert {**printed, "exported_at": 0} == {**document, "exported_at": 0}
    document["exported_at"] = printed["exported_at"]
    assert result.stdout == json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    out = tmp_path / "long.json"
    result = invoke("export", "long", "--out", str(out), "--store", place.url)
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(out.read_text(encoding="utf-8"))["state"]["messages"] == document["state"]["messages"]
    assert f"({out.stat().st_size:,} bytes)" in result.stderr
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


def test_export_of_a_damaged_run_says_so_and_stops_at_the_last_intact_save(place: Place, invoke: Invoke) -> None:
    with open_store(place.url) as store:
        long_run(store)
        damage(store, 7)
    result = invoke("export", "long", "--store", place.url)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert "save record 7 of run 'long' is damaged" in document["damaged"]
    assert [point["seq"] for point in document["save_points"]] == list(range(1, 7))
    assert "warning: save record 7" in result.stderr


def runs_listed(output: str) -> list[str]:
    return [line.split("│")[1].strip() for line in output.splitlines() if line.startswith("│")]


def test_runs_lists_the_newest_50_by_default_and_every_run_with_all(place: Place, invoke: Invoke) -> None:
    from unbroken.testing.contract import RunWriter

    with open_store(place.url) as store:
        for number in range(130):
            writer = RunWriter(store, f"run-{number:03d}")
            writer.state.updated_at += number % 40  # ties of updated_at: ordered by run id
            writer.turn(1)
        store.submit("waiting task", "waiting")
        newest_first = [row.run_id for row in sorted(store.list_runs(), key=lambda r: (r.updated_at, r.run_id))][::-1]
    result = invoke("runs", "--store", place.url)
    assert result.exit_code == 0, result.output
    assert runs_listed(result.stdout) == [*newest_first[:50], "waiting"]
    assert "the 50 most recently updated runs; more: --limit N or --all" in result.stdout
    result = invoke("runs", "--limit", "7", "--store", place.url)
    assert runs_listed(result.stdout) == [*newest_first[:7], "waiting"]
    result = invoke("runs", "--all", "--store", place.url)
    assert result.exit_code == 0, result.output
    assert runs_listed(result.stdout) == [*newest_first, "waiting"] and "more:" not in result.stdout
    result = invoke("runs", "--limit", "200", "--store", place.url)
    assert runs_listed(result.stdout) == [*newest_first, "waiting"] and "more:" not in result.stdout


def test_effects_lists_the_newest_entries_and_every_one_with_all(place: Place, invoke: Invoke) -> None:
    from unbroken.testing.contract._support import ledger_entry

    with open_store(place.url) as store:
        long_run(store)
        for number in range(130):
            store.ledger_claim(ledger_entry("long", f"call_{number:03d}", created_at=1000.0 + number // 4))
        every = [entry.key for entry in store.ledger_list("long")]
    assert len(every) == 130

    def calls(output: str) -> list[str]:
        return [line.split("│")[1].strip() for line in output.splitlines() if line.startswith("│")]

    result = invoke("effects", "long", "--store", place.url)
    assert result.exit_code == 0, result.output
    assert calls(result.stdout) == every[-100:] and "older ones: --last N or --all" in result.stdout
    result = invoke("effects", "long", "--last", "5", "--store", place.url)
    assert calls(result.stdout) == every[-5:]
    result = invoke("effects", "long", "--all", "--store", place.url)
    assert calls(result.stdout) == every and "older ones" not in result.stdout
