from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "postgres"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "s3"))

from pgtest import fresh_schema
from zombie_world import ZombieWorld

STORES = ["sqlite", "file", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same run, on each store that several processes can share."""
    if request.param == "postgres":
        with fresh_schema("zombie") as (_, url):
            yield url
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        yield f"file://{tmp_path / 'runs'}"


@pytest.fixture
def world(store_url: str, tmp_path: Path) -> Iterator[ZombieWorld]:
    zombies = ZombieWorld(store_url, tmp_path)
    yield zombies
    zombies.close()
