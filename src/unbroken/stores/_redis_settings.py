"""The Redis store's URL options and its check of the server's settings that saves depend on.

Two settings decide whether an acknowledged save stays: the append-only file (``appendonly``,
``appendfsync``: does a save survive a server restart or a power loss) and the eviction policy
(``maxmemory-policy``: may the server delete a run's keys by itself to make room). unbroken sets
no TTL on any key, so only the ``allkeys-*`` policies can evict a run; ``noeviction`` and the
``volatile-*`` policies cannot. Both are read at open and again at every lease acquisition
(``CONFIG SET`` changes them on a live server).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import InsufficientDurability, InvalidStoreURL
from .backend import Durability

ASSUME_NOEVICTION = "assume_noeviction"
OPTIONS = frozenset({"durability", "prefix", "retry_for", "pool_size", ASSUME_NOEVICTION})
LEVELS = ("full", "normal", "none")
SAFE_POLICIES = ("noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl")
"""Policies that never evict a key without a TTL (unbroken's keys have none)."""
UNKNOWN = "unknown"


@dataclass(frozen=True)
class ServerSettings:
    """What the server says about keeping data (``UNKNOWN...`` for what it would not tell)."""

    appendonly: str
    appendfsync: str
    maxmemory_policy: str


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


def assume_noeviction(options: dict[str, str]) -> bool:
    """The ``assume_noeviction=yes`` opt-out: the operator vouches that the server never evicts."""
    value = options.get(ASSUME_NOEVICTION, "no")
    if value not in ("yes", "no"):
        raise InvalidStoreURL(f"{ASSUME_NOEVICTION}={value!r} in store URL; use yes or no")
    return value == "yes"


def check_eviction(policy: str, where: str, *, assumed_safe: bool) -> None:
    """``InsufficientDurability`` unless the server's ``maxmemory-policy`` keeps every run key
    (or the operator vouched for it with ``assume_noeviction=yes``), naming the setting, its
    value and the safe values. Every durability level needs it: an evicted run starts over."""
    if assumed_safe or policy in SAFE_POLICIES:
        return
    safe = "set `maxmemory-policy noeviction` in redis.conf (or CONFIG SET it), or use a Redis of its own for unbroken"
    if policy.startswith(UNKNOWN):
        raise InsufficientDurability(
            f"Redis at {where} does not say its maxmemory-policy ({policy}): a policy of allkeys-* would evict "
            f"runs under memory pressure and make them start over, repeating their side effects. Check that it is "
            f"noeviction (or a volatile-* policy), then add ?{ASSUME_NOEVICTION}=yes to the store URL; or {safe}"
        )
    raise InsufficientDurability(
        f"Redis at {where} has maxmemory-policy={policy}: under memory pressure it deletes any key, run keys "
        f"included, and a run whose keys are gone starts over, repeating its side effects. To keep runs, {safe}; "
        "volatile-lru, volatile-lfu, volatile-random and volatile-ttl are safe too (unbroken sets no TTL)"
    )


def check_durability(
    level: str, settings: ServerSettings, where: str, *, assumed_noeviction: bool = False
) -> Durability:
    """What a server with these settings gives; ``InsufficientDurability`` (saying what to set)
    if that is less than ``level`` asks, or if it may evict run keys (``check_eviction``)."""
    check_eviction(settings.maxmemory_policy, where, assumed_safe=assumed_noeviction)
    appendonly, appendfsync = settings.appendonly, settings.appendfsync
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
