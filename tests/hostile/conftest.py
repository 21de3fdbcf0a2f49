"""Fixtures of the hostile tests: a store URL a child process can share (SQLite, file, and
PostgreSQL where the server is reachable), the driver, and the world directory."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "postgres"))

from pgtest import fresh_schema

# PostgreSQL runs under `make reliability` (slow): the fast share of these tests stays small.
STORES = ["sqlite", "file", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])]


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind = str(request.param)
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    elif kind == "file":
        yield f"file://{tmp_path / 'runs'}"
    else:
        with fresh_schema("hostile") as (_schema, url):
            yield url


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def world(tmp_path: Path) -> Path:
    path = tmp_path / "world"
    path.mkdir()
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep the fast share small: PostgreSQL is slow (its param), and so are the file store, the
    100 MB results and the kill loops under ``arun`` (the rest runs both drivers on SQLite)."""
    for item in items:
        params = getattr(item, "callspec", None)
        if params is None or params.params.get("driver") != "async":
            continue
        # The file store, the 100 MB results and the kill loops under arun run in the slow share.
        if params.params.get("store_url") == "file" or "100_mb" in item.name or "test_kills" in item.name:
            item.add_marker(pytest.mark.slow)
