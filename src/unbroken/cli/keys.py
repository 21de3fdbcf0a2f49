"""``unbroken keys``: the encryption keys of a store (docs/security.md, "Encryption at rest")."""

from __future__ import annotations

import click

from .. import key_rotation, ops
from ._app import friendly_errors, main, store_option
from ._render import make_console


@main.group("keys")
def keys_group() -> None:
    """Encryption at rest: the keys that wrap each run's data key. The store is opened with the
    keys in UNBROKEN_ENCRYPTION_KEY (or UNBROKEN_ENCRYPTION_KEY_FILE) and UNBROKEN_ENCRYPTION_OLD_KEYS."""


@keys_group.command("rotate")
@click.option(
    "--page",
    type=click.IntRange(1, 10_000),
    default=key_rotation.PAGE,
    show_default=True,
    help="Runs re-wrapped per step (each step is one bounded page).",
)
@store_option
@friendly_errors
def rotate_command(page: int, store_url: str) -> None:
    """Re-wrap every run's data key under the current key (UNBROKEN_ENCRYPTION_KEY), reading it
    with the old ones (UNBROKEN_ENCRYPTION_OLD_KEYS). No record is rewritten; safe to stop and
    run again. When it reports done, the old keys can be retired."""
    console = make_console()
    with ops.open_existing_store(store_url) as store:
        done = ops.rotate_all(store, limit=page)
    console.print(
        f"re-wrapped {len(done.rewrapped)} run(s) under key {done.kid}; {done.current} already were; "
        f"{done.plaintext} not encrypted (saved before encryption was on)"
    )
