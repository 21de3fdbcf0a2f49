"""`unbroken migrate`: dry run by default, --apply rewrites runs saved at an older schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cli_helpers import Invoke, Place

from unbroken import RunState, open_store
from unbroken.codec import MIGRATIONS, StoredRecord, encode_full, peek_version


def _save_old_run(url: str, run_id: str = "old-run", version: int = 0) -> list[StoredRecord]:
    """A run whose only save record was written at checkpoint schema ``version``."""
    state = RunState(
        run_id=run_id,
        task="an old task",
        schema_version=version,
        save_seq=1,
        turns=3,
        tokens_used=300,
        messages=[{"role": "user", "content": "an old task"}],
        business_state={"legacy": True},
    )
    with open_store(url) as store:
        store.append(encode_full(state, "start"), expect_seq=0)
        return store.read_records(run_id)


def _add_business_flag(run: dict[str, Any]) -> dict[str, Any]:
    fields = dict(run["fields"])
    fields["business_state"] = {**fields["business_state"], "upgraded": True}
    return {"fields": fields, "messages": run["messages"]}


@pytest.fixture
def migration_from_0() -> Iterator[None]:
    """Register a 0 -> 1 step for the length of one test."""
    MIGRATIONS.steps[0] = _add_business_flag
    yield
    del MIGRATIONS.steps[0]


def test_migrate_dry_run_changes_nothing(seeded: Place, invoke: Invoke, migration_from_0: None) -> None:
    before = _save_old_run(seeded.url)
    result = invoke("migrate", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "old-run" in line)
    assert " 0 " in row and "rewrite 1 save record(s)" in row
    assert "dry run: nothing was changed; run with --apply to migrate 1 run(s)" in result.stdout
    with open_store(seeded.url) as store:
        assert store.read_records("old-run") == before


def test_migrate_reports_current_runs_as_up_to_date(seeded: Place, invoke: Invoke) -> None:
    result = invoke("migrate", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "-run " in line]
    assert len(rows) == 2 and all("up to date" in row for row in rows)


def test_migrate_apply_rewrites_an_older_run_at_the_current_schema(
    seeded: Place, invoke: Invoke, migration_from_0: None
) -> None:
    _save_old_run(seeded.url)
    result = invoke("migrate", "--apply", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    with open_store(seeded.url) as store:
        records = store.read_records("old-run")
        state = store.load("old-run")
    assert [peek_version(record) for record in records] == [MIGRATIONS.current]
    assert state.business_state == {"legacy": True, "upgraded": True}
    assert (state.turns, state.tokens_used, state.messages) == (3, 300, [{"role": "user", "content": "an old task"}])


def test_migrate_apply_fails_loudly_without_a_migration_path(seeded: Place, invoke: Invoke) -> None:
    before = _save_old_run(seeded.url)
    result = invoke("migrate", "--apply", "--store", seeded.url)
    assert result.exit_code == 1
    row = next(line for line in result.stdout.splitlines() if "old-run" in line)
    assert "cannot migrate" in row
    with open_store(seeded.url) as store:
        assert store.read_records("old-run") == before


def test_migrate_refuses_a_run_from_a_newer_unbroken(seeded: Place, invoke: Invoke) -> None:
    before = _save_old_run(seeded.url, "future-run", MIGRATIONS.current + 1)
    result = invoke("migrate", "--apply", "--store", seeded.url)
    row = next(line for line in result.stdout.splitlines() if "future-run" in line)
    assert "newer unbroken" in row
    with open_store(seeded.url) as store:
        assert store.read_records("future-run") == before
