"""The crash-window sweep with encryption at rest on: every child and every check opens the
store with the key from the environment (``UNBROKEN_ENCRYPTION_KEY``), so each crash window is
resumed from sealed records and a sealed ledger with the same guarantees as a plain store."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path

import pytest
from crash_service import CountingService
from test_crash_windows import sweep

from unbroken.acceptance import SEALED_RAW


@pytest.mark.slow  # ~30 s: every window of the sweep, a child process each
def test_no_crash_window_duplicates_loses_or_hides_a_call_on_an_encrypted_store(
    tmp_path: Path, service: CountingService, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNBROKEN_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    sweep("sqlite", url, service, run_id, "sync")
    conn = sqlite3.connect(tmp_path / "runs.db")
    try:
        bodies = [row[0] for row in conn.execute("SELECT body FROM unbroken_records")]
    finally:
        conn.close()
    assert bodies and all(type(body) is bytes and body.startswith(SEALED_RAW) for body in bodies)  # all sealed, raw
