from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from unbroken import Store, open_store


def _file_store_available() -> bool:
    try:
        import unbroken.stores.files  # noqa: F401
    except ImportError:
        return False
    return True


STORE_KINDS = ["memory", "sqlite", "sqlite-normal"] + (["file"] if _file_store_available() else [])


def store_url(kind: str, tmp_path: Path) -> str:
    return {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'runs.db'}",
        "sqlite-normal": f"sqlite:///{tmp_path / 'runs-normal.db'}?durability=normal",
        "file": f"file://{tmp_path / 'runs'}",
    }[kind]


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened = open_store(store_url(request.param, tmp_path))
    yield opened
    opened.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    yield opened
    opened.close()
