"""Crypto-shredding: erasing an encrypted run destroys its data key first, so copies of its bytes
that the store cannot reach (a backup, a replica) can no longer be read."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_erase import hold_a_marker

from unbroken import CorruptCheckpoint, ops
from unbroken.encryption import LocalKeys
from unbroken.errors import EncryptionKeyMissing
from unbroken.stores import open_store
from unbroken.stores.encrypted import DATA_KEY, EncryptedStore

KEY = os.urandom(32)
KEYS = LocalKeys(KEY)
MARKER = "MARKER-shred-me"


def backup(db: Path, to: Path) -> Path:
    """A copy of the SQLite store as a backup tool takes it (the file and its WAL)."""
    to.mkdir()
    for path in db.parent.glob(db.name + "*"):
        shutil.copy(path, to / path.name)
    return to / db.name


def test_a_backup_taken_before_an_erase_cannot_be_read_after_it(tmp_path: Path) -> None:
    """Data keys in a key store of their own: the runs' backup holds none, the erase destroys the key."""
    db, keys_db = tmp_path / "runs.db", tmp_path / "keys" / "keys.db"
    keys_db.parent.mkdir()
    url, key_store = f"sqlite:///{db}", f"sqlite:///{keys_db}"
    with open_store(url, encryption=KEYS, key_store=key_store) as store:
        hold_a_marker(store, MARKER)
    copy = backup(db, tmp_path / "backup")
    with open_store(f"sqlite:///{copy}", encryption=KEYS, key_store=key_store) as restored:
        assert restored.load("victim").business_state == {"secret": MARKER}  # readable until the erase

    with open_store(url, encryption=KEYS, key_store=key_store) as store:
        ops.erase(store, "victim", with_forks=True)

    with open_store(f"sqlite:///{copy}", encryption=KEYS, key_store=key_store) as restored:
        assert restored.exists("victim")  # the backup still holds the run's sealed bytes...
        with pytest.raises(CorruptCheckpoint, match="no data key any more"):
            restored.load("victim")  # ...and nothing can open them, even with the user's key
        assert restored.load("bystander").phase == "completed"
    assert not any(MARKER.encode() in path.read_bytes() for path in copy.parent.iterdir())
    assert not any(MARKER.encode() in path.read_bytes() for path in keys_db.parent.iterdir())


def test_with_keys_kept_beside_the_runs_retiring_the_key_after_an_erase_shreds_earlier_backups(
    tmp_path: Path,
) -> None:
    """Data keys in the store itself: a backup holds the run's wrapped key, readable with the user's
    key. Rotating to a new key after the erase and retiring the old one makes every earlier copy
    unreadable (the erased run's key was never re-wrapped: it was gone)."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    with open_store(url, encryption=KEYS) as store:
        hold_a_marker(store, MARKER)
    copy = backup(db, tmp_path / "backup")
    new = LocalKeys(os.urandom(32), old=[KEY])
    with open_store(url, encryption=new) as store:
        ops.erase(store, "victim", with_forks=True)
        assert ops.rotate_all(store).rewrapped == ["bystander"]
    only_new = LocalKeys(new._keys[new.current_kid])
    with (
        open_store(f"sqlite:///{copy}", encryption=only_new) as restored,
        pytest.raises(EncryptionKeyMissing) as caught,
    ):
        restored.load("victim")
    assert KEYS.current_kid in str(caught.value)
    with open_store(url, encryption=only_new) as store:
        assert store.load("bystander").phase == "completed"  # the live store needs only the new key


def test_erase_destroys_the_data_key_before_it_deletes_the_run(tmp_path: Path) -> None:
    """Killed right after the key is destroyed, the run's bytes are still in the store and
    unreadable; the erase run again removes them."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    with open_store(url, encryption=KEYS) as store:
        hold_a_marker(store, MARKER)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "UNBROKEN_ENCRYPTION_KEY": base64.b64encode(KEY).decode(),
        "UNBROKEN_CRASH_AT": "erase.data_key_destroyed:1",
    }
    command = [sys.executable, "-m", "unbroken.cli", "erase", "victim", "--yes", "--store", url]
    killed = subprocess.run(command, env=env, capture_output=True, check=False)
    assert killed.returncode == -9, killed.stderr
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore) and store.inner.backend.get_entry("victim", DATA_KEY) is None
        assert store.exists("victim")
        with pytest.raises(CorruptCheckpoint, match="no data key any more"):
            store.load("victim")
        done = ops.erase(store, "victim", with_forks=True)
        assert "victim" in done.removed and not store.exists("victim")
