"""What a sweep runs: the user's agent, loaded from a spec, and the kind of store each run gets."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError
from ..runner import Agent
from ..stores.base import Store

AgentFactory = Callable[[Store], Agent]


@dataclass(frozen=True)
class StoreKind:
    """How to give a run its own store. ``in_world``: copying the run's directory (plus
    ``copy_store`` for a server store) copies its store, so recovery can be tested on the copy."""

    name: str
    url: Callable[[Path], str]
    in_world: bool = True
    copy_store: Callable[[Path, Path], None] | None = None
    """Copy the store of the world at the first path into the (new) world at the second."""
    drop_store: Callable[[Path], None] | None = None
    """Delete the store of one world, for stores that do not live in its directory."""
    drop_all: Callable[[Path], None] | None = None
    """Delete the stores of every world under a working directory (after a sweep, even a failed one)."""


POSTGRES_URL_ENV = "UNBROKEN_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
_POSTGRES_TABLES = ("unbroken_runs", "unbroken_records", "unbroken_effects")


def postgres_server() -> str:
    """The PostgreSQL server sweeps use: ``$UNBROKEN_TEST_POSTGRES_URL`` or the local test server."""
    return os.environ.get(POSTGRES_URL_ENV) or DEFAULT_POSTGRES_URL


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _schema_prefix(workdir: Path) -> str:
    return f"chaos_{_digest(str(workdir.resolve()))}_"


def world_schema(world: Path) -> str:
    """The world's own schema: a hash of its working directory (shared by every world of one
    sweep, so they can all be dropped together) and of its name. Worlds never share a schema."""
    return _schema_prefix(world.parent) + _digest(world.name)


def _postgres_url(world: Path) -> str:
    parts = urlsplit(postgres_server())
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    query.append(("schema", world_schema(world)))
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def _on_postgres(world: Path, statements: Callable[[str], list[str]]) -> None:
    """Run ``statements(schema)`` in one transaction through a store opened on ``world``'s schema
    (only ``stores/`` imports the driver; the store creates the schema if it is missing)."""
    from ..stores.postgres import PostgresStore

    store = PostgresStore(_postgres_url(world))
    try:

        def op(conn: Any, _: bool) -> None:
            with conn.transaction():
                for statement in statements(world_schema(world)):
                    conn.execute(statement)

        store._run(op)
    finally:
        store.close()


def _copy_postgres(world: Path, to: Path) -> None:
    source = world_schema(world)
    # Schema names are our own hex digests (see world_schema), so quoting them is enough.
    _on_postgres(
        to,
        lambda schema: [
            f'INSERT INTO "{schema}".{table} SELECT * FROM "{source}".{table}' for table in _POSTGRES_TABLES
        ],
    )


def _drop_postgres(world: Path) -> None:
    _on_postgres(world, lambda schema: [f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'])


def _drop_all_postgres(workdir: Path) -> None:
    from ..stores.postgres import PostgresStore

    prefix = _schema_prefix(workdir)
    store = PostgresStore(_postgres_url(workdir / "cleanup"))
    try:

        def op(conn: Any, _: bool) -> None:
            rows = conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,))
            for (schema,) in rows.fetchall():
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

        store._run(op)
    finally:
        store.close()


STORE_KINDS: dict[str, StoreKind] = {
    "sqlite": StoreKind("sqlite", lambda world: f"sqlite:///{world / 'store.db'}"),
    "file": StoreKind("file", lambda world: f"file://{world / 'store'}"),
    "postgres": StoreKind(
        "postgres",
        _postgres_url,
        copy_store=_copy_postgres,
        drop_store=_drop_postgres,
        drop_all=_drop_all_postgres,
    ),
}
"""Stores the sweep knows. PostgreSQL: the server of ``$UNBROKEN_TEST_POSTGRES_URL``, one
schema per world (``world_schema``), dropped with the world and by ``drop_all``."""


def drop_stores(store_kind: str, workdir: Path) -> None:
    """Delete what a sweep in ``workdir`` left in a server store (nothing to do for the others)."""
    kind = STORE_KINDS[store_kind]
    if kind.drop_all is not None:
        kind.drop_all(workdir)


def load_factory(spec: str) -> AgentFactory:
    """``module:attr`` or ``path/to/file.py:attr``; ``attr`` is an ``Agent`` (its store is
    replaced) or a callable taking the store and returning an ``Agent``."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ConfigError(f"--agent {spec!r} must look like module:attr or path/to/file.py:attr")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {path}")
            sys.path.insert(0, str(path.parent))
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(target)
        found = getattr(module, attr)
    except (ImportError, AttributeError, OSError) as exc:
        raise ConfigError(f"cannot load agent {spec!r}: {exc}") from exc
    if isinstance(found, Agent):
        template = found

        def from_template(store: Store) -> Agent:
            template.store = store
            return template

        return from_template
    if not callable(found):
        raise ConfigError(f"{spec!r} is neither an Agent nor a function returning one")

    def from_factory(store: Store) -> Agent:
        agent = found(store)
        if not isinstance(agent, Agent):
            raise ConfigError(f"{spec!r} returned {type(agent).__name__}, not an unbroken Agent")
        return agent

    return from_factory
