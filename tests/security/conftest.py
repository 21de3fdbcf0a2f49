"""Fixtures for the security tests: a SQLite store full of hostile runs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_runs import HostileStore, build_hostile_store


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileStore]:
    monkeypatch.delenv("UNBROKEN_STORE", raising=False)
    yield build_hostile_store(tmp_path / "runs.db")


# The server helpers of the integration tiers (PostgreSQL, Redis, the S3 test server).
for _tier in ("postgres", "redis", "s3"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / _tier))
