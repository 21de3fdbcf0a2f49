"""A batch of saves of different runs as one PostgreSQL transaction: one round trip, one commit.

The saves go in one pipeline: ``BEGIN``, each save's own statement (``append_record`` or
``append`` of ``queries.sql``, unchanged, as ``executemany`` per statement), ``COMMIT``, one sync.
Each save gets its own answer from its own statement's row count (1: written; 0: its head or
its fence was not as expected, nothing of it written), so a refused save costs the others
nothing: those statements do not raise when refused (their ``UPDATE`` matches no row), and no
savepoint is needed. A save is answered only after the ``COMMIT`` has been answered: a crash
before it loses the whole batch, none of which was acknowledged.

If the batch raises anyway (a constraint, the server's own error), the transaction is rolled
back whole and ``BatchFailed`` tells every save to be sent again alone, to get its own answer
or its own error. A lost connection (``OperationalError``) is the caller's ``_run`` retry: the
batch is sent again with ``retried``, and a save whose statement now finds nothing to do checks
whether the lost attempt wrote it, as a save alone does.

A batch whose saves all have no ledger entry (most saves) is one statement instead
(``append_batch``: the saves' values as arrays, ``RETURNING`` the runs written), sent in a
pipeline of its own so the commit still comes after a crash point: one statement to parse, bind
and run on the server instead of one per save plus ``BEGIN`` and ``COMMIT``, and one ``execute``
in the client instead of the pipeline's per-statement work (the same answers, the same rollback
of the whole batch when it raises).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from .. import crashpoints
from ._pg_group_commit import Pending

__all__ = ["BATCH_COLUMNS", "BatchFailed", "send_batch"]

Conn = psycopg.Connection[tuple[Any, ...]]
AlreadyWritten = Callable[[Conn, Any, "int | None"], bool]

BATCH_COLUMNS = (
    "run_id", "seq", "expect_seq", "fence", "label", "snapshot", "body", "checksum",
    "task", "phase", "turns", "tokens_used", "updated_at",
)  # fmt: skip
"""The parameters of ``append_batch``: each one the list of that value of every save."""


class BatchFailed(Exception):
    """The batch's transaction raised and was rolled back: nothing of it was written."""


def send_batch(
    conn: Conn,
    batch: list[Pending],
    retried: bool,
    cursor: psycopg.Cursor[tuple[Any, ...]],
    already_written: AlreadyWritten,
    one_statement: tuple[bytes, bytes] | None = None,
) -> None:
    """Send ``batch`` in one transaction on ``conn`` (autocommit) and answer each save.
    ``cursor`` (of ``conn``) serves the first statement's saves. ``one_statement``: (the
    statement of a save without ledger entries, ``append_batch``): a batch of such saves only
    goes as that one statement."""
    if one_statement is not None and all(pending.statement == one_statement[0] for pending in batch):
        _send_as_one(conn, batch, retried, cursor, already_written, one_statement[1])
        return
    groups: dict[bytes, list[Pending]] = {}
    for pending in batch:
        crashpoints.hit("postgres.before_append")
        groups.setdefault(pending.statement, []).append(pending)
    sent: list[tuple[psycopg.Cursor[tuple[Any, ...]], list[Pending]]] = []
    try:
        with conn.pipeline(), conn.transaction():
            for statement, group in groups.items():
                cur = cursor if not sent else conn.cursor()
                cur.executemany(statement, [pending.params for pending in group], returning=True)
                sent.append((cur, group))
            crashpoints.hit("postgres.group_commit")  # the statements sent, the COMMIT not yet
    except psycopg.OperationalError:
        raise
    except psycopg.Error as exc:
        raise BatchFailed(str(exc)) from exc
    for cur, group in sent:
        for index, pending in enumerate(group):
            if index:
                cur.nextset()
            pending.written = cur.rowcount == 1 or (retried and already_written(conn, pending.save, pending.fence))
            pending.done = True


def _send_as_one(
    conn: Conn,
    batch: list[Pending],
    retried: bool,
    cursor: psycopg.Cursor[tuple[Any, ...]],
    already_written: AlreadyWritten,
    statement: bytes,
) -> None:
    params: dict[str, list[Any]] = {column: [] for column in BATCH_COLUMNS}
    for pending in batch:
        crashpoints.hit("postgres.before_append")
        for column, values in params.items():
            values.append(pending.params[column])
    try:
        with conn.pipeline():  # the statement, then its commit at the sync: a crash point between
            cursor.execute(statement, params)
            crashpoints.hit("postgres.group_commit")  # the statement sent, the commit not yet
        written = {row[0] for row in cursor.fetchall()}
    except psycopg.OperationalError:
        raise
    except psycopg.Error as exc:
        raise BatchFailed(str(exc)) from exc
    for pending in batch:
        pending.written = pending.key in written or (retried and already_written(conn, pending.save, pending.fence))
        pending.done = True
