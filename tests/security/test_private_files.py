"""Stores are created owner-only: under the usual umask 022 no file a local store creates is
readable by another user, unless the store URL asks for it (``?mode=0640``)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from unbroken import Agent, InvalidStoreURL, ScriptedModel, open_store

FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def modes_under(root: Path) -> dict[str, int]:
    found = {str(path.relative_to(root)): stat.S_IMODE(path.stat().st_mode) for path in root.rglob("*")}
    return found | {".": stat.S_IMODE(root.stat().st_mode)}


def sqlite_modes(db: Path, url: str) -> dict[str, int]:
    with open_store(url) as store:
        Agent(ScriptedModel([FINAL]), store=store).run("secret task", run_id="r1")
        return {path.name: stat.S_IMODE(path.stat().st_mode) for path in db.parent.iterdir()}


def test_a_new_sqlite_store_and_its_wal_and_shm_are_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    modes = sqlite_modes(db, f"sqlite:///{db}")
    assert {"runs.db", "runs.db-wal", "runs.db-shm"} <= set(modes)
    assert set(modes.values()) == {0o600}, {name: oct(mode) for name, mode in modes.items()}


def test_a_sqlite_store_asked_for_group_read_gets_it(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    modes = sqlite_modes(db, f"sqlite:///{db}?mode=0640")
    assert modes["runs.db"] == 0o640 and modes["runs.db-wal"] == 0o640


def test_a_new_file_store_is_owner_only_all_the_way_down(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with open_store(f"file://{root}") as store:
        Agent(ScriptedModel([FINAL]), store=store).run("secret task", run_id="r1")
    modes = modes_under(root)
    files = {name: oct(mode) for name, mode in modes.items() if (root / name).is_file() and mode != 0o600}
    dirs = {name: oct(mode) for name, mode in modes.items() if (root / name).is_dir() and mode != 0o700}
    assert len(modes) > 5 and not files and not dirs, (files, dirs)


def test_a_file_store_asked_for_group_read_gets_0640_files_and_0750_directories(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with open_store(f"file://{root}?mode=0640") as store:
        Agent(ScriptedModel([FINAL]), store=store).run("secret task", run_id="r1")
    modes = modes_under(root)
    assert {mode for name, mode in modes.items() if (root / name).is_file()} == {0o640}
    assert {mode for name, mode in modes.items() if (root / name).is_dir()} == {0o750}


@pytest.mark.parametrize("mode", ["0400", "0777", "rw", "0700", "1600"])
def test_a_mode_that_is_not_owner_read_write_file_permissions_is_refused_with_the_fix(
    tmp_path: Path, mode: str
) -> None:
    with pytest.raises(InvalidStoreURL, match="mode must be octal file permissions"):
        open_store(f"sqlite:///{tmp_path / 'x.db'}?mode={mode}")
    assert not (tmp_path / "x.db").exists()
