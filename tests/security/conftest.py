"""Fixtures for the security tests: a SQLite store full of hostile runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_runs import HostileStore, build_hostile_store


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileStore]:
    monkeypatch.delenv("UNBROKEN_STORE", raising=False)
    yield build_hostile_store(tmp_path / "runs.db")
