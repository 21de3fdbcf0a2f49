"""The Redis store's URL options and its check of the server's persistence settings."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import InsufficientDurability
from .backend import Durability

OPTIONS = frozenset({"durability", "prefix", "retry_for"})
LEVELS = ("full", "normal", "none")


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """(the URL for redis-py, unbroken's own options)."""
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in params if key in OPTIONS}
    theirs = [(key, value) for key, value in params if key not in OPTIONS]
    return urlunsplit(parts._replace(query=urlencode(theirs))), ours


def where_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379} db {parts.path.lstrip('/') or '0'}"


def check_durability(level: str, appendonly: str, appendfsync: str, where: str) -> Durability:
    """What a server with these persistence settings gives; ``InsufficientDurability`` (saying
    what to set) if that is less than ``level`` asks."""
    fix = "set `appendonly yes` and `appendfsync always` in redis.conf (or CONFIG SET them)"
    if level == "full" and (appendonly, appendfsync) != ("yes", "always"):
        raise InsufficientDurability(
            f"Redis at {where} has appendonly={appendonly}, appendfsync={appendfsync}: an acknowledged "
            f"save could be lost if the server or its machine crashes. For durability=full {fix}; or open "
            "the store with ?durability=normal (needs appendfsync everysec) or ?durability=none"
        )
    # With CONFIG disabled the fsync policy is unknown, but an enabled append-only file is
    # written before the reply, which is what durability=normal promises.
    if level == "normal" and (appendonly != "yes" or appendfsync == "no"):
        raise InsufficientDurability(
            f"Redis at {where} has appendonly={appendonly}, appendfsync={appendfsync}: a server "
            "restart could lose saves. For durability=normal set `appendonly yes` and `appendfsync "
            "everysec` (or always); or open the store with ?durability=none"
        )
    # A store in another process keeps what it was told even if this one dies; the server's
    # own files decide what survives the server.
    return "power_loss" if (appendonly, appendfsync) == ("yes", "always") else "process_crash"
