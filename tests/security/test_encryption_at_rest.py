"""Encryption at rest (``open_store(url, encryption=keys)``): no byte of what a run holds is kept
in clear by any store, sealed bytes moved to another run or position do not load, and a store
without the key (or with a wrong one) says so instead of reporting a checksum failure."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
from test_erase import Place, hold_a_marker, place  # noqa: F401  (the fixture: every store and its raw bytes)

from unbroken import Agent, CorruptCheckpoint, ScriptedModel, open_store, tool
from unbroken.acceptance import SEALED_RAW
from unbroken.codec import EncodedSave, checksum, encode_full
from unbroken.encryption import LocalKeys, key_from_file, keys_from_environment
from unbroken.errors import EncryptionKeyMissing, EncryptionUnavailable, InvalidEncryptionKey, WrongEncryptionKey
from unbroken.state import RunState
from unbroken.stores import _sealing
from unbroken.stores.backend import seal
from unbroken.stores.encrypted import DATA_KEY, EncryptedStore
from unbroken.testing.contract import RunWriter

KEY = os.urandom(32)
KEYS = LocalKeys(KEY)


def turns(*texts: str) -> list[dict[str, object]]:
    """One tool call per text (its input and result hold the text), then a final answer."""
    replies: list[dict[str, object]] = []
    for number, text in enumerate(texts):
        call = {"type": "tool_use", "id": f"t{number}", "name": "note", "input": {"text": text}}
        replies.append({"content": [{"type": "text", "text": text}, call], "stop_reason": "tool_use", "usage": {}})
    replies.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}})
    return replies


@tool(effect="side_effect")
def note(text: str) -> str:
    """Write a note."""
    return f"noted {text}"


def run(url: str, run_id: str, *texts: str, keys: LocalKeys | None = KEYS) -> None:
    with open_store(url, encryption=keys) as store:
        Agent(ScriptedModel(turns(*texts)), tools=[note], store=store).run(f"task {texts[0]}", run_id=run_id)


def test_no_byte_of_a_run_is_kept_in_clear_by_any_store(place: Place) -> None:  # noqa: F811
    if place.url == "memory://":
        pytest.skip("the memory store keeps nothing outside the process")
    marker = f"MARKER-{uuid.uuid4().hex}"
    with open_store(place.url, encryption=KEYS) as store:
        hold_a_marker(store, marker)  # task, model text, tool input and result, business state, forks
        assert marker in store.list_runs()[-1].task or any(marker in row.task for row in store.list_runs())
        assert store.load("victim").business_state == {"secret": marker}
        assert any(marker in (entry.result.content if entry.result else "") for entry in store.ledger_list("victim"))
        assert marker.encode() not in place.raw()  # with the store open: SQLite's WAL too
    assert marker.encode() not in place.raw()


def test_the_same_runs_without_encryption_keep_the_marker_in_clear(tmp_path: Path) -> None:
    """The check above can fail: the same runs, not encrypted, show the marker in the SQLite file."""
    marker = f"MARKER-{uuid.uuid4().hex}"
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        hold_a_marker(store, marker)
    assert any(marker.encode() in path.read_bytes() for path in tmp_path.iterdir())


def _sqlite(db: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)  # a second connection, as another process (or an attacker) would
    try:
        with conn:
            return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def test_a_sealed_record_copied_to_another_position_fails_to_load(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    run(url, "r1", "alpha", "beta", "gamma")
    ((body, check),) = _sqlite(db, "SELECT body, checksum FROM unbroken_records WHERE run_id='r1' AND seq=3")
    _sqlite(db, "UPDATE unbroken_records SET body=?, checksum=? WHERE run_id='r1' AND seq=4", (body, check))
    with open_store(url, encryption=KEYS) as store:
        with pytest.raises(CorruptCheckpoint, match=r"save record 4 .* does not decrypt") as caught:
            store.load("r1")
        assert caught.value.last_good_seq == 3
        assert store.load("r1", recover=True).save_seq == 3  # the intact save points still show


def test_a_sealed_run_copied_under_another_run_id_fails_to_load(tmp_path: Path) -> None:
    """Every row of run r1, its data key entry included, copied under the id r2 (checksums and
    all): the records do not open there (the run id is sealed with them)."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    run(url, "r1", "alpha", "beta")
    run(url, "r2", "alpha", "beta")
    _sqlite(db, "DELETE FROM unbroken_records WHERE run_id='r2'")
    copied = ("run_id", "key")  # (store schema 8 keys a record by its run's number: run_no * 2^32 + seq)
    names = [str(row[1]) for row in _sqlite(db, "PRAGMA table_info(unbroken_records)")]
    columns = ", ".join(name for name in names if name not in copied)
    _sqlite(
        db,
        f"INSERT INTO unbroken_records (key, run_id, {columns}) "
        f"SELECT (SELECT run_no FROM unbroken_runs WHERE run_id='r2') * 4294967296 + seq, 'r2', {columns} "
        "FROM unbroken_records WHERE run_id='r1'",
    )
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        key = store.inner.backend.get_entry("r1", DATA_KEY)
        assert key is not None
        store.inner.backend.put_entry(seal(replace(key.entry, run_id="r2")), fence=None)  # its checksum made right
    with open_store(url, encryption=KEYS) as store:
        with pytest.raises(CorruptCheckpoint, match=r"save record 1 .* does not decrypt"):
            store.load("r2")
        assert store.load("r1").phase == "completed"


def test_a_sealed_record_file_copied_to_another_position_or_run_fails_to_load(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store'}"
    run(url, "r1", "alpha", "beta", "gamma")
    run(url, "r2", "alpha", "beta", "gamma")
    records = tmp_path / "store" / "runs"
    (records / "r2" / "records" / f"{2:012d}.json").write_bytes(
        (records / "r1" / "records" / f"{2:012d}.json").read_bytes()
    )
    # Another position: the body of record 3 under record 4's header (the file names its seq).
    header, _ = (records / "r1" / "records" / f"{4:012d}.json").read_text().splitlines()
    _, moved = (records / "r1" / "records" / f"{3:012d}.json").read_text().splitlines()
    (records / "r1" / "records" / f"{4:012d}.json").write_text(f"{header}\n{moved}\n")
    with open_store(url, encryption=KEYS) as store:
        with pytest.raises(CorruptCheckpoint, match="save record 4 "):
            store.load("r1")
        with pytest.raises(CorruptCheckpoint, match=r"save record 2 .* does not decrypt"):
            store.load("r2")


def test_a_plaintext_record_put_in_an_encrypted_run_is_refused(tmp_path: Path) -> None:
    """Replacing a sealed record by a plaintext one (a valid record, right checksum) is refused."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    run(url, "plain", "alpha", "beta", keys=None)
    run(url, "sealed", "alpha", "beta")
    ((body, check),) = _sqlite(db, "SELECT body, checksum FROM unbroken_records WHERE run_id='plain' AND seq=1")
    _sqlite(db, "UPDATE unbroken_records SET body=?, checksum=? WHERE run_id='sealed' AND seq=1", (body, check))
    with open_store(url, encryption=KEYS) as store:
        with pytest.raises(CorruptCheckpoint, match="plaintext where run 'sealed' is encrypted"):
            store.load("sealed")
        assert store.load("plain").phase == "completed"  # a plaintext run still reads


def test_a_sealed_ledger_result_moved_to_another_key_fails_to_load(tmp_path: Path) -> None:
    """One call's sealed result put in another call's entry, its checksum made right (it is no
    secret): the result does not open there (the ledger key is sealed with it)."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "r1", "alpha", "beta")
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        first, second = sorted(entry.key for entry in store.ledger_list("r1"))
        moved, target = store.inner.backend.get_entry("r1", first), store.inner.backend.get_entry("r1", second)
        assert moved is not None and target is not None
        store.inner.backend.put_entry(seal(replace(target.entry, result=moved.entry.result)), fence=None)
        with pytest.raises(CorruptCheckpoint, match="does not decrypt"):
            store.ledger_get("r1", second)
        assert store.ledger_get("r1", first) is not None


def test_without_its_key_an_encrypted_run_says_so_and_names_the_key_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "r1", "alpha")
    with open_store(url) as plain, pytest.raises(EncryptionKeyMissing) as caught:
        plain.load("r1")
    assert KEYS.current_kid in str(caught.value) and "encrypted at rest" in str(caught.value)
    assert not isinstance(caught.value, CorruptCheckpoint)  # not reported as damage


def test_a_provider_without_that_key_id_names_the_key_id_it_needs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "r1", "alpha")
    with open_store(url, encryption=LocalKeys(os.urandom(32))) as other, pytest.raises(EncryptionKeyMissing) as caught:
        other.load("r1")
    assert KEYS.current_kid in str(caught.value)


def test_a_wrong_key_under_the_same_key_id_is_a_corrupt_checkpoint_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "r1", "alpha", keys=LocalKeys(("prod-2026", KEY)))
    with open_store(url, encryption=LocalKeys(("prod-2026", os.urandom(32)))) as wrong:
        with pytest.raises(WrongEncryptionKey, match="prod-2026"):
            wrong.load("r1")
        with pytest.raises(CorruptCheckpoint):  # the same family as other damage
            wrong.load("r1")


def test_a_store_with_keys_reads_plaintext_runs_and_seals_what_it_adds_to_them(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    run(url, "old", "alpha", keys=None)
    with open_store(url, encryption=KEYS) as store:
        state = store.load("old")
        assert state.phase == "completed" and store.list_runs()[0].task == "task alpha"
        head = state.save_seq
        store.rewrite("old", [_with_task_note(state, "omega")], expect_seq=head)  # (as compaction does)
        assert store.load("old").business_state == {"note": "omega"}
    bodies = [row[0] for row in _sqlite(db, "SELECT body FROM unbroken_records WHERE run_id='old' ORDER BY seq")]
    assert len(bodies) == 1 and type(bodies[0]) is bytes  # sealed, kept raw (a BLOB)
    assert b"omega" not in bodies[0] and bodies[0].startswith(SEALED_RAW)


def _with_task_note(state: RunState, text: str) -> EncodedSave:
    state.business_state = {"note": text}
    state.save_seq += 1
    return encode_full(state, "noted")


def test_keys_from_a_file_raw_or_base64_and_a_clear_error_for_a_wrong_length(tmp_path: Path) -> None:
    raw, text, short = tmp_path / "raw.key", tmp_path / "b64.key", tmp_path / "short.key"
    raw.write_bytes(KEY)
    text.write_text(__import__("base64").b64encode(KEY).decode() + "\n")
    short.write_bytes(os.urandom(16))
    assert key_from_file(raw).current_kid == key_from_file(text).current_kid == KEYS.current_kid
    with pytest.raises(InvalidEncryptionKey, match="not 32 bytes"):
        key_from_file(short)


def test_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import base64

    old = os.urandom(32)
    env = {
        "UNBROKEN_ENCRYPTION_KEY": base64.b64encode(KEY).decode(),
        "UNBROKEN_ENCRYPTION_OLD_KEYS": f"old:{base64.b64encode(old).decode()}",
    }
    keys = keys_from_environment(env)
    assert keys is not None and keys.kids == [KEYS.current_kid, "old"]
    assert keys_from_environment({}) is None
    with pytest.raises(InvalidEncryptionKey):
        keys_from_environment({"UNBROKEN_ENCRYPTION_KEY": "c2hvcnQ="})
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        assert isinstance(store, EncryptedStore)


def test_without_cryptography_installed_a_clear_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name == "cryptography" or name.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cryptography", None)  # import cryptography now raises ImportError
    store = open_store("memory://", encryption=LocalKeys(KEY))
    with store, pytest.raises(EncryptionUnavailable, match=r"pip install 'unbroken\[encryption\]'"):
        Agent(ScriptedModel(turns("alpha")), tools=[note], store=store).run("task", run_id="r1")


def test_import_unbroken_and_opening_a_store_do_not_import_cryptography() -> None:
    code = (
        "import sys, unbroken\n"
        "from unbroken.stores import open_store\n"
        "from unbroken.encryption import LocalKeys\n"
        "open_store('memory://', encryption=LocalKeys(bytes(32))).close()\n"
        "assert 'cryptography' not in sys.modules, 'imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_the_cipher_is_pycas_public_aesgcm() -> None:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from unbroken.encryption._cipher import _aesgcm_class

    assert _aesgcm_class() is AESGCM


def test_a_run_erased_and_made_anew_by_another_process_reads_with_its_new_key(tmp_path: Path) -> None:
    """A data key cached by one store is looked up again before a record is called damaged."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url, encryption=KEYS) as reader:
        run(url, "r1", "alpha")
        assert reader.load("r1").phase == "completed"  # its data key is cached now
        with open_store(url, encryption=KEYS) as other:
            other.delete_run("r1")
        run(url, "r1", "beta")  # a new run under the same id: a new data key
        assert reader.load("r1").task == "task beta"


def test_the_runs_listing_shows_the_task_with_the_key_and_never_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    from click.testing import CliRunner

    from unbroken.cli import main

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "r1", "zebra-secret")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("UNBROKEN_ENCRYPTION_KEY", raising=False)
    without = CliRunner().invoke(main, ["runs", "--store", url])
    assert without.exit_code == 0 and "r1" in without.output and "zebra-secret" not in without.output
    monkeypatch.setenv("UNBROKEN_ENCRYPTION_KEY", base64.b64encode(KEY).decode())
    with_key = CliRunner().invoke(main, ["runs", "--store", url])
    assert with_key.exit_code == 0 and "task zebra-secret" in with_key.output


def test_two_stores_starting_one_run_at_once_agree_on_its_data_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both look for the run's data key before either has written one; the key entry is
    insert-if-absent, so the second uses the first's key, and each reads what the other wrote."""
    from unbroken.state import LedgerEntry, ToolResult

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url, encryption=KEYS) as first, open_store(url, encryption=KEYS) as second:
        assert isinstance(first, EncryptedStore) and isinstance(second, EncryptedStore)
        real = second.backend.key_store.get_entry
        looked: list[str] = []

        def before_the_other_wrote(run_id: str, key: str) -> object:
            if key == DATA_KEY and not looked:
                looked.append(run_id)
                first.ledger_put(
                    LedgerEntry("r1", "k1", "c1", "note", "h", "succeeded", result=ToolResult("c1", "one"))
                )
                return None  # what it read just before the other store wrote its key
            return real(run_id, key)

        monkeypatch.setattr(second.backend.key_store, "get_entry", before_the_other_wrote)
        second.ledger_put(LedgerEntry("r1", "k2", "c2", "note", "h", "succeeded", result=ToolResult("c2", "two")))
        assert looked == ["r1"]
        for store in (first, second):
            results = {entry.key: entry.result.content for entry in store.ledger_list("r1") if entry.result}
            assert results == {"k1": "one", "k2": "two"}


def test_a_worker_without_the_key_never_starts_a_queued_encrypted_run(tmp_path: Path) -> None:
    """The queued task is sealed; a store without keys claims it and must not start the run from
    the sealed text: the start is refused (nothing written), saying the run is encrypted."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url, encryption=KEYS) as store:
        store.submit("task zebra-secret", "q1")
    with open_store(url) as plain:
        (claimed,) = plain.claim_runnable("worker-a", 60.0)
        assert "zebra-secret" not in claimed.task
        plain.release_lease(claimed.lease)
        with pytest.raises(EncryptionKeyMissing, match="encrypted at rest"):
            Agent(ScriptedModel(turns("alpha")), tools=[note], store=plain).run(claimed.task, run_id="q1")
        assert not plain.exists("q1")
    with open_store(url, encryption=KEYS) as store:
        assert store.queued("q1") is not None and store.queued("q1").task == "task zebra-secret"  # type: ignore[union-attr]


@pytest.mark.parametrize("packed", [False, True], ids=["records", "segments"])
def test_a_plaintext_run_continued_under_keys_loads_its_bound_and_its_sealed_records(
    tmp_path: Path, packed: bool
) -> None:
    # Records bound to their run in plaintext, then sealed ones: once opened, a sealed record
    # counts as bound (its associated data binds it), so the run reads as one run-bound run.
    url = f"sqlite:///{tmp_path / 'runs.db'}" + ("?pack_batch=2&keep_recent=1&sealed_read_from=0" if packed else "")
    with open_store(url) as plain:
        writer = RunWriter(plain, "mixed")
        for step in range(1, 4):
            writer.turn(step)
    with open_store(url, encryption=KEYS) as store:
        writer.store, writer.state = store, store.load("mixed")
        writer.encoder.prime(writer.state)
        for step in range(4, 12):
            writer.turn(step)
        assert store.load("mixed").save_seq == 11
        assert [record["seq"] for record in store.decode("mixed").records] == list(range(1, 12))


def test_a_segment_sealed_before_runs_were_bound_still_reads_after_bound_records(tmp_path: Path) -> None:
    # A unit sealed before records were bound holds plain CRC-32s in its sealed index; it opens
    # (its associated data binds it to the run), so its records are taken as bound, not as
    # plain records after bound ones.
    url = f"sqlite:///{tmp_path / 'runs.db'}?pack_batch=2&keep_recent=1&sealed_read_from=0"
    with open_store(url) as plain:
        writer = RunWriter(plain, "mixed")
        for step in range(1, 4):
            writer.turn(step)
    with (
        mock.patch.object(_sealing, "checksum", lambda body, seed=0: checksum(body)),  # as sealed before
        open_store(url, encryption=KEYS) as store,
    ):
        writer.store, writer.state = store, store.load("mixed")
        writer.encoder.prime(writer.state)
        for step in range(4, 12):
            writer.turn(step)
    with open_store(url, encryption=KEYS) as store:
        assert store.load("mixed").save_seq == 11
