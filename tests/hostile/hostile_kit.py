"""Helpers of the hostile tests: run the child, count executions, read a run's answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unbroken.crashpoints import ENV_VAR

CHILD = Path(__file__).with_name("hostile_child.py")


@dataclass(frozen=True)
class Child:
    returncode: int
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def outcome(self) -> dict[str, Any]:
        lines = self.stdout.strip().splitlines()
        assert lines, f"the child printed nothing (rc {self.returncode}): {self.stderr[-2000:]}"
        return dict(json.loads(lines[-1]))


def run_child(
    script: str, store: str, run_id: str, world: Path, *extra: str, crash_at: str | None = None, timeout: float = 120
) -> Child:
    env = {key: value for key, value in os.environ.items() if key != ENV_VAR}
    if crash_at is not None:
        env[ENV_VAR] = crash_at
    args = [sys.executable, str(CHILD), script, "--store", store, "--run-id", run_id, "--world", str(world), *extra]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return Child(done.returncode, done.stdout, done.stderr)


def executions(world: Path) -> Counter[str]:
    """How many times each tool ran, across every process, from the child's journal."""
    path = world / "journal.jsonl"
    if not path.exists():
        return Counter()
    return Counter(json.loads(line)["tool"] for line in path.read_text().splitlines() if line.strip())


def journal(world: Path) -> list[dict[str, Any]]:
    path = world / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def tool_results(messages: Sequence[Any]) -> list[Mapping[str, Any]]:
    """Every tool_result block of an Anthropic history, in order."""
    found: list[Mapping[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            found += [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result"]
    return found


# ---------------------------------------------------------------------- damage done by hand


def _sql(url: str, statement: str, params: tuple[object, ...]) -> int:
    """Run one statement on the store's database from outside unbroken, as a person would."""
    if url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///").split("?")[0])
        try:
            with conn:
                return conn.execute(statement.replace("%s", "?"), params).rowcount
        finally:
            conn.close()
    import psycopg

    from unbroken.stores import open_store

    with open_store(url) as store:
        conninfo = store.backend.settings.conninfo  # type: ignore[attr-defined]
    with psycopg.connect(conninfo, autocommit=True) as pg:
        return pg.execute(statement, params).rowcount


def _file_root(url: str) -> Path:
    return Path(url.removeprefix("file://"))


def delete_record(url: str, run_id: str, seq: int) -> None:
    """Delete save ``seq`` of ``run_id`` by hand."""
    if url.startswith("file://"):
        (_file_root(url) / "runs" / run_id / "records" / f"{seq:012d}.json").unlink()
        return
    assert _sql(url, "DELETE FROM unbroken_records WHERE run_id=%s AND seq=%s", (run_id, seq)) == 1


def edit_ledger(url: str, run_id: str, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in the stored text of the run's ledger entries, by hand."""
    if url.startswith("file://"):
        changed = 0
        for path in (_file_root(url) / "runs" / run_id / "effects").iterdir():
            text = path.read_text()
            if old in text:
                path.write_text(text.replace(old, new))
                changed += 1
        assert changed, f"{old!r} is in no ledger file"
        return
    statement = "UPDATE unbroken_effects SET {col}=replace({col}, %s, %s) WHERE run_id=%s AND {col} LIKE %s"
    changed = 0
    for column in ("status", "result"):
        changed += _sql(url, statement.format(col=column), (old, new, run_id, f"%{old}%"))
    assert changed, f"{old!r} is in no ledger row"
