"""Fixtures of the crash tests: the stores a child process can share with its parent, and the
counting service. Adding a store is one line in ``STORE_URLS``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from crash_service import CountingService


def _file_store_available() -> bool:
    try:
        import unbroken.stores.files  # noqa: F401
    except ImportError:
        return False
    return True


# Stores that outlive a process (memory cannot). PostgreSQL joins when its URL is given.
STORE_URLS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'runs.db'}",
    # Packing after every save: every crash window is also a window of a run whose records are
    # being moved into segments (and a kill can land inside a pack).
    "sqlite-packed": lambda tmp: f"sqlite:///{tmp / 'runs.db'}?keep_recent=1&pack_batch=2&sealed_read_from=0",
}
if _file_store_available():
    STORE_URLS["file"] = lambda tmp: f"file://{tmp / 'runs'}"
if os.environ.get("UNBROKEN_TEST_POSTGRES_URL"):
    STORE_URLS["postgres"] = lambda tmp: os.environ["UNBROKEN_TEST_POSTGRES_URL"]


@pytest.fixture(params=sorted(STORE_URLS))
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path) -> str:
    return STORE_URLS[store_kind](tmp_path)


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> str:
    """Which driver of the one engine runs the agent: ``Agent.run`` or ``Agent.arun``."""
    return str(request.param)


@pytest.fixture(params=["sync", pytest.param("async", marks=pytest.mark.slow)])
def sweep_driver(request: pytest.FixtureRequest) -> str:
    """``driver`` for the long window sweep: the async pass runs under ``make reliability``."""
    return str(request.param)


@pytest.fixture
def service(tmp_path: Path) -> CountingService:
    return CountingService(tmp_path / "service.jsonl")


@pytest.fixture
def run_id() -> str:
    # Unique, so a shared server store (PostgreSQL) never mixes two tests' runs.
    return f"crash-{uuid.uuid4().hex[:12]}"
