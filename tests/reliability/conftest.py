from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_agents import AGENT, TASK

from unbroken.codec import StoredRecord
from unbroken.testing import chaos


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory for chaos runs, on tmpfs when there is one: a SIGKILL loses nothing the page
    cache holds, so real fsyncs would only slow the process-crash sweeps down."""
    shm = Path("/dev/shm")
    if shm.is_dir():
        path = Path(tempfile.mkdtemp(prefix="unbroken-reliability-", dir=shm))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path


@pytest.fixture(scope="session")
def agent_factory() -> chaos.AgentFactory:
    return chaos.load_factory(AGENT)


@pytest.fixture(scope="session")
def sample_records(tmp_path_factory: pytest.TempPathFactory) -> list[StoredRecord]:
    """The save records of one complete run of the example agent (all three tool classes)."""
    import os

    from chaos_agent import SERVICE_ENV, make_agent

    from unbroken import open_store

    os.environ[SERVICE_ENV] = str(tmp_path_factory.mktemp("service"))
    try:
        store = open_store("memory://")
        make_agent(store).run(TASK, run_id="sample")
        return store.read_records("sample")
    finally:
        del os.environ[SERVICE_ENV]
