"""What the file store (``file:///DIR``) adds to the store contract: its on-disk layout, durable
writes that leave nothing half-done behind, and how it reports damaged or missing files."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from unbroken import crashpoints
from unbroken.codec import MAX_RECORD_BYTES, encode_full
from unbroken.errors import CorruptCheckpoint, IncompatibleSchema, StoreUnavailable
from unbroken.stores import open_store
from unbroken.stores.files import FileStore
from unbroken.testing.contract import RunWriter, ledger_entry


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[FileStore]:
    store = FileStore(tmp_path / "store")
    yield store
    store.close()


def run_dir(store: FileStore, run_id: str) -> Path:
    return store.backend.root / "runs" / run_id


def record_path(store: FileStore, run_id: str, seq: int) -> Path:
    return run_dir(store, run_id) / "records" / f"{seq:012d}.json"


def leftover_temp_files(store: FileStore) -> list[Path]:
    return [path for path in store.backend.root.rglob("*") if path.name.endswith(".tmp") or ".new" in path.name]


def saved_run(store: FileStore, run_id: str = "run-1", turns: int = 3) -> RunWriter:
    run = RunWriter(store, run_id)
    for step in range(1, turns + 1):
        run.turn(step)
    return run


def fail_fsync(monkeypatch: pytest.MonkeyPatch, *, on_call: int, code: int = errno.EIO) -> list[int]:
    """Make the ``on_call``-th os.fsync from now raise OSError(code), once. Returns the call log."""
    real: Callable[[int], None] = os.fsync
    calls: list[int] = []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == on_call:
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


# --------------------------------------------------------------------------- layout


def test_open_store_with_a_file_url_gives_a_multi_process_file_store(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/runs")

    assert isinstance(store, FileStore)
    assert {"leases", "ledger", "multi_process"} <= store.capabilities
    assert (tmp_path / "runs" / "unbroken-store.json").is_file()


def test_each_save_point_is_one_file_of_a_json_header_line_and_the_body_verbatim(file_store: FileStore) -> None:
    run = RunWriter(file_store, "run-layout")
    first = run.turn(1)
    second = run.save("second", ledger=[ledger_entry("run-layout")])

    for save in (first, second):
        header_line, body_line = record_path(file_store, "run-layout", save.seq).read_text().splitlines()
        header = json.loads(header_line)
        assert body_line == save.body
        assert json.loads(body_line)["seq"] == save.seq
        assert (header["seq"], header["checksum"], header["label"], header["snapshot"]) == (
            save.seq,
            save.checksum,
            save.label,
            save.snapshot,
        )
        assert header["bytes"] == len(save.body.encode())
    effects = list((run_dir(file_store, "run-layout") / "effects").iterdir())
    assert [json.loads(path.read_text())["status"] for path in effects] == ["pending"]


def test_the_lease_is_a_json_file_and_the_previous_generation_is_kept(file_store: FileStore) -> None:
    first = file_store.acquire_lease("run-lease", "worker-a", 60)
    second = file_store.acquire_lease("run-lease", "worker-b", 60, takeover_from="worker-a")

    lease = json.loads((run_dir(file_store, "run-lease") / "lease.json").read_text())
    previous = json.loads((run_dir(file_store, "run-lease") / "lease.prev.json").read_text())
    assert (lease["owner"], lease["fence"], lease["expires_at"]) == ("worker-b", second.fence, second.expires_at)
    assert (previous["owner"], previous["fence"]) == ("worker-a", first.fence)


def test_a_damaged_lease_file_never_lets_the_fence_go_back(file_store: FileStore) -> None:
    for _ in range(3):
        latest = file_store.acquire_lease("run-fence", "worker-a", 60)
    (run_dir(file_store, "run-fence") / "lease.json").write_text("{not json")

    again = file_store.acquire_lease("run-fence", "worker-b", 60)

    assert again.fence > latest.fence


def test_a_save_seq_that_does_not_follow_expect_seq_is_refused(file_store: FileStore) -> None:
    run = saved_run(file_store, turns=1)
    save = run.encode()

    with pytest.raises(ValueError, match="cannot follow"):
        file_store.append(save, expect_seq=0)


def test_a_ledger_key_that_is_not_a_safe_file_name_is_stored_under_a_hashed_name(file_store: FileStore) -> None:
    entry = ledger_entry("run-keys", key="../../etc/passwd")

    file_store.ledger_put(entry)

    assert file_store.ledger_get("run-keys", entry.key) == entry
    names = [path.name for path in (run_dir(file_store, "run-keys") / "effects").iterdir()]
    assert len(names) == 1
    assert names[0].startswith("~")


def test_delete_run_leaves_nothing_behind(file_store: FileStore) -> None:
    saved_run(file_store)
    file_store.acquire_lease("run-1", "worker-a", 60)

    file_store.delete_run("run-1")

    assert list((file_store.backend.root / "runs").iterdir()) == []
    assert list((file_store.backend.root / "trash").iterdir()) == []


def test_a_save_passes_its_crash_points_in_order(file_store: FileStore) -> None:
    seen: list[str] = []
    crashpoints.observe(seen.append)
    try:
        saved_run(file_store, turns=1)
    finally:
        crashpoints.observe(None)

    assert seen[-3:] == ["file.after_temp_write", "file.before_rename", "file.after_rename"]


# --------------------------------------------------------------------------- failures


def test_a_failed_fsync_raises_store_unavailable_leaves_no_temp_file_and_keeps_the_run(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = saved_run(file_store, turns=1)
    fail_fsync(monkeypatch, on_call=1)

    with pytest.raises(StoreUnavailable, match="I/O error") as caught:
        run.turn(2)

    assert "000000000002.json" in str(caught.value)
    assert file_store.load("run-1").save_seq == 1
    assert leftover_temp_files(file_store) == []
    run.turn(2)  # the disk recovered: the next save goes through
    assert file_store.load("run-1").save_seq == 2


def test_a_failed_directory_fsync_takes_the_renamed_record_back(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = saved_run(file_store, turns=1)
    calls = fail_fsync(monkeypatch, on_call=2)  # 1: the temp file, 2: the records directory

    with pytest.raises(StoreUnavailable):
        run.turn(2)

    assert len(calls) >= 2
    assert not record_path(file_store, "run-1", 2).exists()
    assert file_store.load("run-1").save_seq == 1
    assert leftover_temp_files(file_store) == []


def test_a_failed_ledger_write_in_a_save_writes_no_record(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = saved_run(file_store, turns=1)
    fail_fsync(monkeypatch, on_call=1)

    with pytest.raises(StoreUnavailable):
        run.save("with ledger", ledger=[ledger_entry("run-1")])

    assert file_store.load("run-1").save_seq == 1
    assert file_store.ledger_list("run-1") == []
    assert leftover_temp_files(file_store) == []


def test_a_full_disk_is_reported_as_such(file_store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    run = saved_run(file_store, turns=1)
    fail_fsync(monkeypatch, on_call=1, code=errno.ENOSPC)

    with pytest.raises(StoreUnavailable, match="no space left"):
        run.turn(2)

    assert leftover_temp_files(file_store) == []


def test_a_failed_rewrite_keeps_the_old_records(file_store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    saved_run(file_store)
    before = file_store.read_records("run-1")
    state = file_store.load("run-1")
    state.save_seq = 4
    fail_fsync(monkeypatch, on_call=2)

    with pytest.raises(StoreUnavailable):
        file_store.rewrite("run-1", [encode_full(state, "compacted")], expect_seq=3)

    assert file_store.read_records("run-1") == before
    assert leftover_temp_files(file_store) == []


def test_a_store_path_under_a_regular_file_raises_store_unavailable_at_open(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory")

    with pytest.raises(StoreUnavailable, match="not a directory") as caught:
        FileStore(tmp_path / "afile" / "store")

    assert "afile" in str(caught.value)
    with pytest.raises(StoreUnavailable):
        open_store(f"file://{tmp_path}/afile/store")


def test_a_store_path_that_is_a_regular_file_raises_store_unavailable_at_open(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory")

    with pytest.raises(StoreUnavailable, match="not a directory"):
        FileStore(tmp_path / "afile")


def test_a_read_only_store_directory_raises_store_unavailable_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FileStore(tmp_path / "store")
    real_open = os.open

    def read_only_open(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)  # root ignores chmod, so fake a read-only mount

    with pytest.raises(StoreUnavailable, match="read-only") as caught:
        FileStore(tmp_path / "store")

    assert str(tmp_path / "store") in str(caught.value)


def test_a_store_written_by_a_newer_unbroken_is_refused(tmp_path: Path) -> None:
    FileStore(tmp_path / "store")
    (tmp_path / "store" / "unbroken-store.json").write_text('{"store": "unbroken-files", "store_schema": 99}')

    with pytest.raises(IncompatibleSchema, match="99"):
        FileStore(tmp_path / "store")


# --------------------------------------------------------------------------- damaged files


def test_a_truncated_last_record_raises_corrupt_checkpoint_and_recover_gives_the_last_intact_state(
    file_store: FileStore,
) -> None:
    run = saved_run(file_store, turns=2)
    intact = file_store.load("run-1")
    run.turn(3)
    path = record_path(file_store, "run-1", 3)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])

    with pytest.raises(CorruptCheckpoint, match="save record 3") as caught:
        file_store.load("run-1")

    assert caught.value.last_good_seq == 2
    recovered = file_store.load("run-1", recover=True)
    assert (recovered.save_seq, recovered.messages, recovered.turns) == (2, intact.messages, intact.turns)


def test_a_record_file_that_does_not_parse_at_all_is_reported_at_its_seq(file_store: FileStore) -> None:
    saved_run(file_store)
    record_path(file_store, "run-1", 3).write_bytes(b"\x00\x01garbage")

    with pytest.raises(CorruptCheckpoint, match="save record 3"):
        file_store.load("run-1")

    assert file_store.read_records("run-1")[-1].checksum == "unreadable"
    assert file_store.load("run-1", recover=True).save_seq == 2


def test_a_missing_record_file_in_the_middle_is_reported_not_skipped(file_store: FileStore) -> None:
    saved_run(file_store, turns=4)
    record_path(file_store, "run-1", 2).unlink()

    with pytest.raises(CorruptCheckpoint, match="save record 2"):
        file_store.load("run-1")

    assert file_store.load("run-1", recover=True).save_seq == 1


def test_a_record_file_over_the_size_cap_is_refused_unread(file_store: FileStore) -> None:
    saved_run(file_store)
    os.truncate(record_path(file_store, "run-1", 3), MAX_RECORD_BYTES + 2 * 1024 * 1024)  # sparse: costs no disk

    records = file_store.read_records("run-1")

    assert records[-1].body == ""
    assert records[-1].checksum.startswith("unreadable")
    with pytest.raises(CorruptCheckpoint):
        file_store.load("run-1")


# --------------------------------------------------------------------------- interrupted rewrites


def compacted_records_dir(tmp_path: Path, store: FileStore, run_id: str) -> tuple[Path, int]:
    """A complete records directory holding one snapshot of the run (built in another store)."""
    state = store.load(run_id)
    state.save_seq += 1
    other = FileStore(tmp_path / "other")
    other.rewrite(run_id, [encode_full(state, "compacted")], expect_seq=0)
    return other.backend.root / "runs" / run_id / "records", state.save_seq


def test_a_rewrite_interrupted_between_its_renames_is_finished_by_the_next_reader(
    tmp_path: Path, file_store: FileStore
) -> None:
    saved_run(file_store)
    expected = file_store.load("run-1")
    built, seq = compacted_records_dir(tmp_path, file_store, "run-1")
    directory = run_dir(file_store, "run-1")
    os.rename(built, directory / "records.new")
    os.rename(directory / "records", directory / "records.old")  # the crash fell right here

    records = file_store.read_records("run-1")

    assert [r.seq for r in records] == [seq]
    assert file_store.load("run-1").messages == expected.messages
    assert sorted(p.name for p in directory.iterdir() if p.name.startswith("records")) == ["records"]


def test_a_rewrite_interrupted_while_building_keeps_the_old_records(tmp_path: Path, file_store: FileStore) -> None:
    run = saved_run(file_store)
    built, _ = compacted_records_dir(tmp_path, file_store, "run-1")
    directory = run_dir(file_store, "run-1")
    os.rename(built, directory / "records.new")  # the crash fell before the first rename

    assert [r.seq for r in file_store.read_records("run-1")] == [1, 2, 3]
    run.turn(4)
    state = file_store.load("run-1")
    state.save_seq = 5
    file_store.rewrite("run-1", [encode_full(state, "compacted")], expect_seq=4)
    assert [r.seq for r in file_store.read_records("run-1")] == [5]
    assert leftover_temp_files(file_store) == []


def _python(script: str, *, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(crashpoints.ENV_VAR, None)
    if crash_at is not None:
        env[crashpoints.ENV_VAR] = crash_at
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_process_killed_between_the_rewrite_renames_leaves_the_rewritten_run(file_store: FileStore) -> None:
    saved_run(file_store)
    expected = file_store.load("run-1")
    script = f"""
        from unbroken.codec import encode_full
        from unbroken.stores.files import FileStore
        store = FileStore({str(file_store.backend.root)!r})
        state = store.load("run-1")
        state.save_seq = 4
        store.rewrite("run-1", [encode_full(state, "compacted")], expect_seq=3)
    """

    killed = _python(script, crash_at="file.rewrite_between_renames:1")

    assert killed.returncode == -9, killed.stderr
    assert not (run_dir(file_store, "run-1") / "records").exists()
    assert [r.seq for r in file_store.read_records("run-1")] == [4]
    assert file_store.load("run-1").messages == expected.messages


def test_ledger_claims_from_several_processes_create_exactly_one_entry(file_store: FileStore) -> None:
    script = f"""
        import sys
        from unbroken.stores.files import FileStore
        from unbroken.testing.contract import ledger_entry
        store = FileStore({str(file_store.backend.root)!r})
        _, created = store.ledger_claim(ledger_entry("run-race", tool="worker-" + sys.argv[1]))
        print(created)
    """
    workers = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(n)], stdout=subprocess.PIPE, text=True)
        for n in range(4)
    ]
    outputs = [worker.communicate(timeout=60)[0].strip() for worker in workers]

    assert sorted(outputs) == ["False", "False", "False", "True"]
    assert len(file_store.ledger_list("run-race")) == 1


# --------------------------------------------------------------------------- segments

SMALL_PACKING = "import unbroken.stores.files as files; files.KEEP_RECENT = 4; files.PACK_BATCH = 8"


@pytest.fixture
def small_packing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pack every 8 records, keeping the 4 newest loose (the defaults need hundreds of saves)."""
    monkeypatch.setattr("unbroken.stores.files.KEEP_RECENT", 4)
    monkeypatch.setattr("unbroken.stores.files.PACK_BATCH", 8)


def names_in_records(store: FileStore, run_id: str = "run-1") -> list[str]:
    return sorted(p.name for p in (run_dir(store, run_id) / "records").iterdir() if not p.name.startswith("HEAD"))


@pytest.mark.usefixtures("small_packing")
def test_older_saves_are_packed_into_segments_and_the_newest_stay_one_file_each(file_store: FileStore) -> None:
    run = saved_run(file_store, turns=20)

    assert names_in_records(file_store) == [
        "000000000017.json",
        "000000000018.json",
        "000000000019.json",
        "000000000020.json",
        "segment-000000000001-000000000008.json",
        "segment-000000000009-000000000016.json",
    ]
    assert comparable_state(file_store.load("run-1")) == comparable_state(run.state)
    assert [r.seq for r in file_store.read_records("run-1")] == list(range(1, 21))


@pytest.mark.usefixtures("small_packing")
def test_a_segment_is_an_index_line_then_a_json_array_of_the_bodies_verbatim(file_store: FileStore) -> None:
    run = RunWriter(file_store, "run-1")
    written = [run.turn(step) for step in range(1, 13)]

    segment = run_dir(file_store, "run-1") / "records" / "segment-000000000001-000000000008.json"
    index, bodies = segment.read_bytes().decode().splitlines()

    texts = [save.body_bytes().decode() for save in written[:8]]  # (a plain save's body is text)
    assert bodies == "[" + ",".join(texts) + "]"
    assert json.loads(bodies) == [json.loads(text) for text in texts]
    assert json.loads(index)["segment"] == {
        "first": 1,
        "checksums": [save.checksum for save in written[:8]],
        "lengths": [len(text.encode()) for text in texts],
        "snapshots": [save.seq for save in written[:8] if save.snapshot],
    }


@pytest.mark.usefixtures("small_packing")
def test_a_damaged_body_in_a_segment_is_reported_at_its_seq_and_nothing_is_changed(file_store: FileStore) -> None:
    saved_run(file_store, turns=12)
    segment = run_dir(file_store, "run-1") / "records" / "segment-000000000001-000000000008.json"
    data = segment.read_bytes()
    at = data.index(b"step 5")  # in the body of record 5
    segment.write_bytes(data[:at] + b"stop" + data[at + 4 :])
    before = names_in_records(file_store)

    with pytest.raises(CorruptCheckpoint) as caught:
        file_store.load("run-1")

    assert caught.value.last_good_seq == 4
    assert names_in_records(file_store) == before


@pytest.mark.usefixtures("small_packing")
def test_a_damaged_segment_index_is_reported_at_the_segments_first_seq(file_store: FileStore) -> None:
    saved_run(file_store, turns=20)
    segment = run_dir(file_store, "run-1") / "records" / "segment-000000000009-000000000016.json"
    segment.write_bytes(b"{not json" + segment.read_bytes())

    with pytest.raises(CorruptCheckpoint) as caught:
        file_store.load("run-1")

    assert caught.value.last_good_seq == 8


@pytest.mark.usefixtures("small_packing")
def test_a_damaged_record_file_is_never_packed(file_store: FileStore) -> None:
    run = saved_run(file_store, turns=4)
    record_path(file_store, "run-1", 3).write_text("torn")
    for step in range(5, 21):
        run.turn(step)

    assert "segment-000000000001-000000000002.json" in names_in_records(file_store)
    assert record_path(file_store, "run-1", 3).read_text() == "torn"
    with pytest.raises(CorruptCheckpoint) as caught:
        file_store.load("run-1")
    assert caught.value.last_good_seq == 2


def comparable_state(state: object) -> object:
    from unbroken.testing.contract._support import comparable

    return comparable(state)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("crash_at", "segment_written"),
    [
        ("file.after_temp_write:13", False),  # save 12's record is the 12th file written, its segment the 13th
        ("file.pack.segment_written:1", True),
        ("file.pack.unlinking:1", True),
    ],
    ids=["segment-not-yet-renamed", "segment-written", "half-unlinked"],
)
def test_a_process_killed_while_packing_loses_nothing_and_the_next_save_finishes_the_pack(
    file_store: FileStore, crash_at: str, segment_written: bool
) -> None:
    script = f"""
        {SMALL_PACKING}
        from unbroken.stores.files import FileStore
        from unbroken.testing.contract import RunWriter
        run = RunWriter(FileStore({str(file_store.backend.root)!r}), "run-1")
        for step in range(1, 13):
            run.turn(step)
            print(step, flush=True)
    """

    killed = _python(script, crash_at=crash_at)

    assert killed.returncode == -9, killed.stderr
    assert killed.stdout.split()[-1] == "11"  # save 12 was durable; its pack was cut short
    assert ("segment-000000000001-000000000008.json" in names_in_records(file_store)) == segment_written
    state = file_store.load("run-1")
    assert state.save_seq == 12 and state.turns == 12
    assert [r.seq for r in file_store.read_records("run-1")] == list(range(1, 13))
    resumed = RunWriter(file_store, "run-1")
    resumed.state = state
    resumed.encoder.prime(state)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("unbroken.stores.files.KEEP_RECENT", 4)
        patch.setattr("unbroken.stores.files.PACK_BATCH", 8)
        for step in range(13, 17):
            resumed.turn(step)
    assert [n for n in names_in_records(file_store) if not n.startswith("segment")] == [
        f"{seq:012d}.json" for seq in range(9, 17)
    ]
    assert file_store.load("run-1").turns == 16


@pytest.mark.usefixtures("small_packing")
def test_the_resume_read_streams_segments_and_files_in_order_and_a_read_left_early_lets_saves_go_on(
    file_store: FileStore,
) -> None:
    run = saved_run(file_store, turns=20)
    streamed = file_store.iter_raw_records("run-1")
    first = next(iter(streamed))
    assert first.seq == 1
    assert isinstance(streamed, Generator)
    streamed.close()  # the shared lock goes with it: the next save is not blocked
    run.turn(21)

    records = list(file_store.iter_raw_records("run-1"))
    assert [r.seq for r in records] == list(range(1, 22))
    assert records == file_store.read_raw_records("run-1")
    assert all(type(r.body) is bytes for r in records)
    assert list(file_store.iter_raw_records("run-never-saved")) == []


@pytest.mark.usefixtures("small_packing")
def test_a_record_file_missing_after_the_segments_is_reported_at_its_seq(file_store: FileStore) -> None:
    saved_run(file_store, turns=20)
    record_path(file_store, "run-1", 18).unlink()

    with pytest.raises(CorruptCheckpoint) as caught:
        file_store.load("run-1")
    assert caught.value.last_good_seq == 17
    assert "18" in str(caught.value)
