"""The store seam is a boundary: above ``unbroken.stores`` nothing reaches a backend's
primitives (``read_head``, ``records_after``, ``swap_head``, ...) or the backend itself; every
module calls ``Store``'s methods, which check the run id at the door and keep the rules.

The test machinery in ``unbroken.testing`` is left out on purpose: the contract suite tests the
primitives themselves, and the simulator wraps backends to inject faults."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import unbroken
from unbroken.stores import backend
from unbroken.stores.base import Store

SRC = Path(unbroken.__file__).resolve().parent
LEFT_OUT = ("stores", "testing")


def _methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")}


DECLARED = [
    backend.Backend,
    backend.QueueBackend,
    backend.Queue,
    backend.RawReads,
    backend.StreamedReads,
    backend.SegmentReads,
    backend.PackedReads,
    backend.SnapshotIndex,
    backend.ServerCheck,
    backend.OneStepClaim,
]
PRIMITIVES = frozenset(set().union(*map(_methods, DECLARED)) - _methods(Store)) | {"backend"}
"""Every method a backend declares that ``Store`` does not also offer, and ``.backend``."""


def _private_names() -> frozenset[str]:
    from unbroken.stores.memory import InMemoryBackend

    names = set(dir(Store)) | set(vars(Store(InMemoryBackend())))
    return frozenset(name for name in names if name.startswith("_") and not name.endswith("__"))


STORE_PRIVATE = _private_names()
"""``Store``'s private methods and attributes (``_not_found``, ``_queue``, ...): behind the door."""


def offenders(root: Path) -> Iterator[str]:
    """``path:line: .name`` for each use of a primitive in a module of ``root`` outside
    ``LEFT_OUT`` (a call, or a bound method handed on), and each use of a private name of
    ``Store`` on anything but ``self`` or ``cls`` (an object's own private names are its own)."""
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in LEFT_OUT:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Attribute):
                continue
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if node.attr in PRIMITIVES or (node.attr in STORE_PRIVATE and not own):
                yield f"{relative}:{node.lineno}: .{node.attr}"


def test_the_primitives_are_the_seam_s_names() -> None:
    assert {"read_head", "swap_head", "write_record", "records_after", "insert_entry", "lease_time"} <= PRIMITIVES
    assert {"snapshot_seq", "claim_in_one_step", "check_server", "list_submissions"} <= PRIMITIVES
    assert "load" not in PRIMITIVES and "read_packed" not in PRIMITIVES  # Store's own methods


def test_nothing_above_the_stores_reaches_a_primitive() -> None:
    found = list(offenders(SRC))
    assert found == [], "call a Store method instead (add one to Store if none fits):\n" + "\n".join(found)


def test_the_checker_finds_a_primitive_reached_from_above(tmp_path: Path) -> None:
    (tmp_path / "window.py").write_text("def f(store, run_id):\n    return store.read_head(run_id)\n")
    (tmp_path / "ops.py").write_text("def g(store):\n    reader = store.backend.list_summaries\n    return reader()\n")
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "sqlite.py").write_text("def h(self, run_id):\n    return self.read_head(run_id)\n")
    assert list(offenders(tmp_path)) == [
        "ops.py:2: .list_summaries",
        "ops.py:2: .backend",
        "window.py:2: .read_head",
    ]


def test_the_checker_finds_a_private_store_name_reached_from_above(tmp_path: Path) -> None:
    (tmp_path / "missing.py").write_text("def f(store, run_id):\n    return store._not_found(run_id)\n")
    (tmp_path / "worker.py").write_text("def g(store):\n    return store._queue\n")
    (tmp_path / "engine.py").write_text("class E:\n    def h(self):\n        return self._queue\n")  # its own
    assert {"_not_found", "_queue"} <= STORE_PRIVATE
    assert list(offenders(tmp_path)) == ["missing.py:2: ._not_found", "worker.py:2: ._queue"]


def test_each_local_store_declares_what_it_did_as_strings(tmp_path: Path) -> None:
    """``capabilities`` is derived from the typed declarations (``reach``, ``Queue``) and shows
    each store what it showed when it was a set of strings."""
    from unbroken.stores.examples.jsonkv import JsonKVStore
    from unbroken.stores.files import FileStore
    from unbroken.stores.memory import InMemoryStore
    from unbroken.stores.sqlite import SQLiteStore

    with SQLiteStore(tmp_path / "s.db") as sqlite, FileStore(tmp_path / "files") as files:
        assert sqlite.capabilities == {"leases", "ledger", "multi_process", "claim"}
        assert files.capabilities == {"leases", "ledger", "multi_process"}
    assert InMemoryStore().capabilities == {"leases", "ledger", "claim"}
    assert JsonKVStore(tmp_path / "kv").capabilities == {"leases", "ledger", "claim"}


def test_a_backend_declares_a_fast_path_by_implementing_its_protocol(tmp_path: Path) -> None:
    from unbroken.stores.memory import InMemoryBackend
    from unbroken.stores.sqlite import SQLiteBackend

    sqlite = SQLiteBackend(tmp_path / "s.db")
    try:
        assert isinstance(sqlite, backend.SegmentReads) and isinstance(sqlite, backend.StreamedReads)
        assert isinstance(sqlite, backend.SnapshotIndex) and isinstance(sqlite, backend.Queue)
        assert not isinstance(sqlite, backend.OneStepClaim) and not isinstance(sqlite, backend.ServerCheck)
    finally:
        sqlite.close()
    memory = InMemoryBackend()
    assert isinstance(memory, backend.SnapshotIndex) and not isinstance(memory, backend.RawReads)


def test_a_backend_without_a_snapshot_index_gets_the_whole_run_scan() -> None:
    """``Store.newest_snapshot`` falls back to reading the run (``scan_for_snapshot``), and the
    windowed load knows it (``indexes_snapshots``): nothing is found by sniffing methods."""
    from unbroken.stores.memory import InMemoryBackend
    from unbroken.testing.simulate.delegate import Delegating

    class Unindexed(Delegating):
        snapshot_seq = None  # type: ignore[assignment]  # this backend has no index

    indexed = Store(InMemoryBackend())
    assert indexed.indexes_snapshots
    assert not isinstance(Unindexed(InMemoryBackend()), backend.SnapshotIndex)
    assert not Store(Unindexed(InMemoryBackend())).indexes_snapshots
