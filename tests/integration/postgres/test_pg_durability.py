"""PostgreSQL's durability is the server's: a store asking for ``full`` (the default) refuses a
server that acknowledges commits it has not flushed (``synchronous_commit=off``, here set for the
store's database role, as an operator tuning for speed would) and says what to set;
``durability=normal`` accepts it and declares only ``process_crash``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from pgtest import connect, fresh_schema
from psycopg import sql

from unbroken.errors import InsufficientDurability, InvalidStoreURL
from unbroken.stores import open_store
from unbroken.stores._postgres_settings import check_durability


@pytest.fixture
def unsynced_url() -> Iterator[str]:
    """A store URL whose user is a role of its own with ``synchronous_commit = off``."""
    role = f"ubt_role_{uuid.uuid4().hex[:10]}"
    with connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("ALTER ROLE {} SET synchronous_commit = off").format(sql.Identifier(role)))
        database = conn.execute("SELECT current_database()").fetchone()
        assert database is not None
        conn.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(*map(sql.Identifier, (database[0], role))))
    try:
        with fresh_schema() as (_, url):
            parts = urlsplit(url)
            yield urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))
    finally:
        with connect() as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_server_with_synchronous_commit_off_is_refused_for_full(unsynced_url: str) -> None:
    with pytest.raises(InsufficientDurability) as refused:
        open_store(unsynced_url)

    assert "synchronous_commit=off" in str(refused.value)
    assert "durability=normal" in str(refused.value)


def test_normal_accepts_it_and_declares_process_crash_only(unsynced_url: str) -> None:
    with open_store(unsynced_url + "&durability=normal") as store:
        store.acquire_lease("run-normal", "worker-a", 60.0)  # the check at acquisition passes too
        assert store.durability == "process_crash"


def test_the_default_server_is_power_loss_safe(pg_url: str) -> None:
    with open_store(pg_url) as store:
        assert store.durability == "power_loss"


def test_fsync_off_is_refused_for_full_and_named() -> None:
    """fsync is server-wide: shown on the decision function, not on the shared test server."""
    with pytest.raises(InsufficientDurability, match="fsync=off"):
        check_durability("full", "off", "on", "here")
    assert check_durability("normal", "off", "on", "here") == "process_crash"


def test_an_unknown_durability_level_is_an_invalid_url(pg_url: str) -> None:
    with pytest.raises(InvalidStoreURL, match="durability='fast'"):
        open_store(pg_url + "&durability=fast")
