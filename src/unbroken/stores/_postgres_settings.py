"""The PostgreSQL store's check of the server settings an acknowledged save depends on.

``fsync=off`` (server-wide) lets a crash of the server's machine lose or corrupt committed data;
``synchronous_commit=off`` (per server, database, role or session) acknowledges a commit before
its WAL is flushed, so a crash of the server loses the last ones. Either leaves only what a crash
of the agent's own process cannot take (the server still has the data in memory). Read at open
and again at every lease acquisition (both settings change on a reload, without a restart).
"""

from __future__ import annotations

from ..errors import InsufficientDurability, InvalidStoreURL
from .backend import Durability

LEVELS = ("full", "normal")


def level_of(options: dict[str, str]) -> str:
    """The ``durability=full|normal`` URL option (default ``full``)."""
    level = options.get("durability", "full")
    if level not in LEVELS:
        raise InvalidStoreURL(f"durability={level!r} in store URL; use one of {', '.join(LEVELS)}")
    return level


def check_durability(level: str, fsync: str, synchronous_commit: str, where: str) -> Durability:
    """What a server with these settings gives; ``InsufficientDurability`` (naming the setting,
    its value and what to set) when ``level`` is ``full`` and it is less than power-loss safe."""
    unsafe = [f"{name}={value}" for name, value in (("fsync", fsync), ("synchronous_commit", synchronous_commit))]
    unsafe = [item for item in unsafe if item.endswith("=off")]
    if not unsafe:
        return "power_loss"
    if level == "full":
        raise InsufficientDurability(
            f"PostgreSQL at {where} has {' and '.join(unsafe)}: an acknowledged save could be lost if the server "
            "or its machine crashes. For durability=full set fsync = on in postgresql.conf and synchronous_commit "
            "to on (postgresql.conf, or ALTER DATABASE/ROLE ... SET synchronous_commit = on), then reload; or "
            "open the store with ?durability=normal (a crash of the agent's own process loses nothing)"
        )
    return "process_crash"
