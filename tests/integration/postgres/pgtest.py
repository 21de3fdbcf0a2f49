"""A pytest plugin for tests against a real PostgreSQL server.

The server comes from ``UNBROKEN_TEST_POSTGRES_URL`` (default: the local test server,
``postgresql://postgres@127.0.0.1:5432/test``). Each test gets its own schema, dropped after it.
When the server cannot be reached, the tests are skipped with the reason, unless the ``CI``
environment variable is set: then they fail, so CI never passes without running them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from unbroken.stores.postgres import PostgresStore

URL_ENV_VAR = "UNBROKEN_TEST_POSTGRES_URL"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server_url() -> str:
    return os.environ.get(URL_ENV_VAR) or DEFAULT_URL


def with_options(url: str, **options: str) -> str:
    """``url`` with query options added or replaced."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(options)
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def libpq_url(url: str) -> str:
    """``url`` without unbroken's own options, for a plain psycopg connection."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("schema", "pool_size", "retry_for")]
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


@functools.cache
def unreachable_reason() -> str | None:
    try:
        with psycopg.connect(libpq_url(server_url()), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {server_url()} is unreachable ({' '.join(str(exc).split())}); set {URL_ENV_VAR}"
    return None


def require_server() -> None:
    """Skip (or, with CI set, fail) the calling test when the server cannot be reached."""
    reason = unreachable_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so PostgreSQL tests must run)")
    pytest.skip(reason)


def connect(schema: str | None = None) -> psycopg.Connection[tuple[Any, ...]]:
    """A plain autocommit connection to the test server, outside any store (in ``schema``)."""
    options: dict[str, Any] = {"options": f"-c search_path={schema}"} if schema else {}
    return psycopg.connect(libpq_url(server_url()), autocommit=True, **options)


def drop_schema(schema: str) -> None:
    with connect() as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def fresh_schema(prefix: str = "ubt") -> Iterator[tuple[str, str]]:
    """A new schema name and a store URL using it; the schema is dropped afterwards."""
    require_server()
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        yield schema, with_options(server_url(), schema=schema)
    finally:
        drop_schema(schema)


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """(schema name, store URL) of a schema of its own for this test."""
    with fresh_schema() as pair:
        yield pair


@pytest.fixture
def pg_url(pg_schema: tuple[str, str]) -> str:
    return pg_schema[1]


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    yield store
    store.close()


class Outage:
    """A TCP proxy in front of the test server that can play a server outage: ``down()`` cuts
    every open connection and refuses new ones, ``up()`` lets connections through again."""

    def __init__(self) -> None:
        target = urlsplit(server_url())
        self.target = (target.hostname or "127.0.0.1", target.port or 5432)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.is_up = True
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` pointed at this proxy instead of the server."""
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def down(self) -> None:
        with self._lock:
            self.is_up = False
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def up(self) -> None:
        with self._lock:
            self.is_up = True

    def close(self) -> None:
        self.down()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if not self.is_up:
                    client.close()
                    continue
                upstream = socket.create_connection(self.target)
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def outage() -> Iterator[Outage]:
    require_server()
    proxy = Outage()
    yield proxy
    proxy.close()
