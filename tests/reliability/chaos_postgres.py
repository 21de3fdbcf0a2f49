"""The PostgreSQL store kind of unbroken's own reliability sweeps: one schema per run, so a run's
store can be copied (recovering twice is checked on the copy) and dropped.

It reaches into the store (a transaction on its connection) and defaults to the local test
server: test machinery, so it lives here and not in ``unbroken.testing.chaos``, whose own
PostgreSQL kind (``server_kind``) uses the public store API only."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from unbroken.testing.chaos import STORE_KINDS, StoreKind
from unbroken.testing.chaos._journal import CHAOS_DIR

POSTGRES_URL_ENV = "UNBROKEN_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
_TABLES = ("unbroken_runs", "unbroken_records", "unbroken_effects")


def postgres_server() -> str:
    """The PostgreSQL server the sweeps use: ``$UNBROKEN_TEST_POSTGRES_URL`` or the local test server."""
    return os.environ.get(POSTGRES_URL_ENV) or DEFAULT_POSTGRES_URL


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _schema_prefix(workdir: Path) -> str:
    return f"chaos_{_digest(str(workdir.resolve()))}_"


def world_schema(world: Path) -> str:
    """The world's own schema: a hash of its working directory (shared by every world of one
    sweep, so they can all be dropped together) and of its name. Worlds never share a schema."""
    return _schema_prefix(world.parent) + _digest(world.name)


def _url(world: Path) -> str:
    parts = urlsplit(postgres_server())
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    query.append(("schema", world_schema(world)))
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def _on_postgres(world: Path, statements: Callable[[str], list[str]]) -> None:
    """Run ``statements(schema)`` in one transaction through a store opened on ``world``'s schema
    (the store creates the schema if it is missing)."""
    from unbroken.stores.postgres import PostgresStore

    store = PostgresStore(_url(world))
    try:

        def op(conn: Any, _: bool) -> None:
            with conn.transaction():
                for statement in statements(world_schema(world)):
                    conn.execute(statement)

        store.backend._run(op)
    finally:
        store.close()


def _copy(world: Path, to: Path) -> None:
    source = world_schema(world)
    columns = {table: ", ".join(_stored_columns(source, table)) for table in _TABLES}
    # Schema names are our own hex digests (see world_schema), so quoting them is enough.
    _on_postgres(
        to,
        lambda schema: [
            f'INSERT INTO "{schema}".{table} ({columns[table]}) SELECT {columns[table]} FROM "{source}".{table}'
            for table in _TABLES
        ],
    )


def _stored_columns(schema: str, table: str) -> list[str]:
    """The columns of ``table`` a copy writes: not the generated ones (migration 0008), which
    PostgreSQL computes and refuses a value for."""
    import psycopg

    parts = urlsplit(postgres_server())
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    with psycopg.connect(urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "AND is_generated = 'NEVER' ORDER BY ordinal_position",
            (schema, table),
        ).fetchall()
    return [f'"{row[0]}"' for row in rows]


def _drop(world: Path) -> None:
    _on_postgres(world, lambda schema: [f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'])


def _drop_all(workdir: Path) -> None:
    from unbroken.stores.postgres import PostgresStore

    prefix = _schema_prefix(workdir)
    store = PostgresStore(_url(workdir / "cleanup"))
    try:

        def op(conn: Any, _: bool) -> None:
            rows = conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,))
            for (schema,) in rows.fetchall():
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

        store.backend._run(op)
    finally:
        store.close()


POSTGRES = StoreKind("postgres", _url, copy_store=_copy, drop_store=_drop, drop_all=_drop_all)
"""One schema per world (``?schema=chaos_<sweep hash>_<run hash>``), dropped with the world."""

SQLITE_PACKED = StoreKind(
    "sqlite-packed",
    lambda world: f"sqlite:///{world / CHAOS_DIR / 'store.db'}?keep_recent=1&pack_batch=2&sealed_read_from=0",
)
"""SQLite packing after every save: the sweeps' short runs have their records moved into segments
as they go, so a kill can land inside a pack and every resume reads segments."""

KINDS: dict[str, StoreKind] = {**STORE_KINDS, "sqlite-packed": SQLITE_PACKED, "postgres": POSTGRES}
"""Every store kind the reliability sweeps run on, by name."""


def skip_unless_postgres() -> None:
    """Skip the calling test when the server is unreachable; with ``CI`` set, fail it instead."""
    import psycopg
    import pytest

    from unbroken.stores.postgres import parse_url

    try:
        with psycopg.connect(parse_url(postgres_server()).conninfo, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = f"PostgreSQL at {postgres_server()} is unreachable ({' '.join(str(exc).split())})"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so PostgreSQL tests must run")
        pytest.skip(f"{reason}; set {POSTGRES_URL_ENV}")


def drop_schema(schema: str) -> None:
    """Drop one schema of the test server (a test's own, named by the test)."""
    import psycopg
    from psycopg import sql

    from unbroken.stores.postgres import parse_url

    with psycopg.connect(parse_url(postgres_server()).conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
