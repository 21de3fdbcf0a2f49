from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provider_server import ProviderServer


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    """A fresh scripted provider server on 127.0.0.1 for one test."""
    running = ProviderServer().start()
    try:
        yield running
    finally:
        running.stop()
