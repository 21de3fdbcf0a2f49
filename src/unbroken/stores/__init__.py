"""Stores: where runs are saved. ``open_store(url)`` picks one by URL scheme."""

from __future__ import annotations

import os

from ..errors import InvalidStoreURL
from .base import Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..encryption import KeyProvider

DEFAULT_STORE_URL = "sqlite:///unbroken.db"
STORE_ENV_VAR = "UNBROKEN_STORE"

_HELP = (
    "use sqlite:///relative.db, sqlite:////absolute/path.db (add ?durability=normal for cheaper saves; "
    "keep_recent=N&pack_batch=M to tune packing), "
    "file:///absolute/dir, memory://, postgresql://user@host:5432/dbname, redis://host:6379/0 "
    "or s3://bucket/prefix"
)


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/:@!$&'()*+,;=%")
"""The characters ``urlsplit`` gives no meaning of its own beyond ``://`` and ``/`` (no ``?``,
``#``, brackets, whitespace, control or non-ASCII characters)."""


def split_url(url: str) -> tuple[str, str, str]:
    """``(netloc, path, query)`` of ``url``, as ``urllib.parse.urlsplit`` gives them. A URL of
    only ``_PLAIN`` characters with an alphabetic scheme (``sqlite:////abs/runs.db``) is split
    here: ``urllib.parse`` (with ``ipaddress``, ~2 ms) is imported only for any other. A test
    checks the two agree on any text."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.isascii() and scheme.isalpha() and _PLAIN.issuperset(rest):
        netloc, slash, path = rest.partition("/")
        return netloc, slash + path, ""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.netloc, parts.path, parts.query


def _options(query: str, allowed: set[str], url: str) -> dict[str, str]:
    if not query:
        return {}
    from urllib.parse import parse_qs

    options = {key: values[-1] for key, values in parse_qs(query, keep_blank_values=True).items()}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidStoreURL(
            f"store URL {url!r} has unknown option(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(allowed)) or 'none'}"
        )
    return options


def _whole_number(options: dict[str, str], name: str, url: str) -> int:
    text = options[name]
    if not text.isdigit():
        raise InvalidStoreURL(f"store URL {url!r}: {name} must be a whole number, not {text!r}")
    return int(text)


def _file_mode(options: dict[str, str], url: str) -> int:
    """``?mode=0640``: the permissions of the files a local store creates (default 0600)."""
    text = options.get("mode", "0600")
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0o600 <= mode <= 0o666 or mode & 0o111:
        raise InvalidStoreURL(
            f"store URL {url!r}: mode must be octal file permissions that let the owner read and write "
            f"(e.g. 0600, the default, or 0640 to let the group read), not {text!r}"
        )
    return mode


_KEY_VARS = ("UNBROKEN_ENCRYPTION_KEY", "UNBROKEN_ENCRYPTION_KEY_FILE", "UNBROKEN_ENCRYPTION_OLD_KEYS")
KEY_STORE_ENV_VAR = "UNBROKEN_ENCRYPTION_KEY_STORE"


def open_store(url: str | None = None, *, encryption: KeyProvider | None = None, key_store: str | None = None) -> Store:
    """Open the store named by ``url`` (default: ``$UNBROKEN_STORE``, else ``sqlite:///unbroken.db``).

    Raises ``InvalidStoreURL`` for a URL it cannot use and ``StoreUnavailable`` when the place
    it names cannot be opened; creates the database file or directory when it is missing.

    ``encryption``: a key provider (``unbroken.encryption``) turns encryption at rest on
    (``stores.encrypted``); without one, a key in ``$UNBROKEN_ENCRYPTION_KEY`` or a key file
    named by ``$UNBROKEN_ENCRYPTION_KEY_FILE`` does. Neither: no encryption (runs that are
    encrypted then refuse to load, naming the key id they need). ``key_store`` (default
    ``$UNBROKEN_ENCRYPTION_KEY_STORE``, else the store itself): the URL of a store that keeps the
    runs' wrapped data keys apart from the runs (docs/security.md)."""
    keys_at = key_store or os.environ.get(KEY_STORE_ENV_VAR) or None
    if encryption is None and not any(os.environ.get(name) for name in _KEY_VARS):
        if key_store is not None:
            raise InvalidStoreURL("key_store= keeps encryption keys: give encryption= (or UNBROKEN_ENCRYPTION_KEY) too")
        return _open(url)
    from ..encryption import keys_from_environment

    keys = encryption if encryption is not None else keys_from_environment()
    assert keys is not None
    store = _open(url)
    try:
        from .encrypted import EncryptedStore

        return EncryptedStore(store, keys, key_store=None if keys_at is None else _open(keys_at))
    except BaseException:
        store.close()
        raise


def _open(url: str | None) -> Store:
    if url is None:
        url = os.environ.get(STORE_ENV_VAR) or DEFAULT_STORE_URL
    if isinstance(url, str) and "://" not in url and url.partition(":")[0].isalpha() and ":" in url:
        scheme, _, rest = url.partition(":")  # sqlite:runs.db: a scheme without its //
        raise InvalidStoreURL(f"store URL {url!r} lacks '//' after {scheme + ':'!r}: write {scheme}:///{rest}; {_HELP}")
    if not isinstance(url, str) or "://" not in url:
        raise InvalidStoreURL(f"store URL {url!r} has no scheme; {_HELP}")
    scheme = url.split("://", 1)[0].lower()
    netloc, path_part, query = split_url(url)
    if scheme == "sqlite":
        from .sqlite import SQLiteStore

        if netloc:
            raise InvalidStoreURL(f"store URL {url!r} names a host ({netloc!r}); SQLite files are local: {_HELP}")
        path = path_part[1:] if path_part.startswith("/") else path_part
        if not path:
            raise InvalidStoreURL(f"store URL {url!r} has no file path; {_HELP}")
        numbers = ("keep_recent", "pack_batch", "sealed_read_from")
        options = _options(query, {"durability", "mode", *numbers}, url)
        packing = {name: _whole_number(options, name, url) for name in numbers if name in options}
        mode = _file_mode(options, url)
        return SQLiteStore(path, durability=options.get("durability", "full"), url=url, mode=mode, **packing)
    if scheme == "file":
        from .files import FileStore

        if netloc not in ("", "localhost"):
            raise InvalidStoreURL(f"store URL {url!r} names a host; {_HELP}")
        if not path_part or path_part == "/":
            raise InvalidStoreURL(f"store URL {url!r} has no directory; {_HELP}")
        return FileStore(path_part, url=url, mode=_file_mode(_options(query, {"mode"}, url), url))
    if scheme == "memory":
        from .memory import InMemoryStore

        return InMemoryStore(url)
    if scheme in ("postgresql", "postgres"):
        try:
            from .postgres import PostgresStore
        except ImportError as exc:
            raise InvalidStoreURL(
                f"store URL {url!r} needs the PostgreSQL driver: pip install 'unbroken[postgres]' ({exc})"
            ) from exc
        return PostgresStore(url)
    if scheme in ("redis", "rediss"):
        try:
            from .redis import RedisStore
        except ImportError as exc:
            raise InvalidStoreURL(
                f"store URL {url!r} needs the Redis client: pip install 'unbroken[redis]' ({exc})"
            ) from exc
        return RedisStore(url)
    if scheme == "s3":
        try:
            from .s3 import S3Store
        except ImportError as exc:
            raise InvalidStoreURL(f"store URL {url!r} needs boto3: pip install 'unbroken[s3]' ({exc})") from exc
        return S3Store(url)
    raise InvalidStoreURL(f"store URL {url!r} has unknown scheme {scheme!r}; {_HELP}")


__all__ = ["DEFAULT_STORE_URL", "KEY_STORE_ENV_VAR", "STORE_ENV_VAR", "Store", "open_store", "split_url"]
