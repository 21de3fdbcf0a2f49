"""Encryption at rest: the keys. Off unless a store is given a key provider.

Each run has its own random 256-bit **data key**; records, ledger results and the task shown in
listings are encrypted under it (``unbroken.stores.encrypted``). The data key is stored with the
run only **wrapped** by a key of yours, through a ``KeyProvider``: anything with ``current_kid``,
``wrap`` and ``unwrap``, so a KMS (AWS KMS, GCP KMS, Vault transit) plugs in by returning its
own envelope. ``LocalKeys`` is the shipped provider: 32-byte keys you hold (an environment
variable, a file), the current one wrapping and every one unwrapping, for rotation.

Nothing here imports ``cryptography`` until a key is used (``import unbroken`` stays fast).
docs/security.md ("Encryption at rest") is the user's documentation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..errors import EncryptionKeyMissing, InvalidEncryptionKey, WrongEncryptionKey
from ..state import JSONValue
from ._cipher import KEY_BYTES, DecryptFailed, aead, b64, unb64

KEY_ENV_VAR = "UNBROKEN_ENCRYPTION_KEY"
"""The current key, as base64 text, or ``ID:BASE64`` to give it an id of your own (``open_store``
uses it when no provider is passed)."""
KEY_FILE_ENV_VAR = "UNBROKEN_ENCRYPTION_KEY_FILE"
"""A file holding the current key: 32 raw bytes or their base64 text."""
OLD_KEYS_ENV_VAR = "UNBROKEN_ENCRYPTION_OLD_KEYS"
"""Earlier keys, still accepted to unwrap (base64, comma-separated): what rotation moves off."""

Envelope = Mapping[str, JSONValue]
"""A wrapped data key: ``{"v": 1, "kid": ..., "alg": ..., ...}``; the rest is the provider's."""

_WRAP_AAD = b"unbroken data key v1"


@runtime_checkable
class KeyProvider(Protocol):
    """Wraps and unwraps data keys. ``wrap`` uses the key named ``current_kid``; ``unwrap`` any
    key the provider still holds (``EncryptionKeyMissing`` for an envelope under a key id it does
    not have, ``WrongEncryptionKey`` when the key under that id does not open it)."""

    @property
    def current_kid(self) -> str:
        """The id of the key ``wrap`` uses now."""
        ...

    def wrap(self, data_key: bytes) -> dict[str, JSONValue]:
        """``data_key`` wrapped under the current key, as a JSON envelope naming its ``kid``."""
        ...

    def unwrap(self, envelope: Envelope) -> bytes:
        """The data key inside ``envelope``."""
        ...


def key_id(key: bytes) -> str:
    """The id of a local key: ``k-`` and 12 hex digits of a SHA-256 over it (a fingerprint, so
    the same key has the same id wherever it is loaded, and the key cannot be read from it)."""
    return "k-" + hashlib.sha256(b"unbroken key id\x00" + key).hexdigest()[:12]


def parse_key(material: bytes | str, where: str) -> bytes:
    """A 32-byte key from raw bytes or base64 text (whitespace around it ignored); ``where`` names
    the source in the error. Raises ``InvalidEncryptionKey``."""
    raw = material.encode() if isinstance(material, str) else material
    if len(raw) == KEY_BYTES and not isinstance(material, str):
        return raw
    try:
        key = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise InvalidEncryptionKey(
            f"the encryption key from {where} is not 32 bytes, raw or as base64 text (it is {len(raw)} bytes"
            f"{'' if not key else f', {len(key)} once base64-decoded'}); make one with `openssl rand -base64 32`"
        )
    return key


NamedKey = bytes | tuple[str, bytes]
"""A key, or (its id, the key): an id of your own (1-64 of A-Z a-z 0-9 . _ -) instead of the fingerprint."""
_KID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _named(item: NamedKey, where: str) -> tuple[str, bytes]:
    if isinstance(item, tuple):
        kid, material = item
        if not isinstance(kid, str) or not _KID.fullmatch(kid):
            raise InvalidEncryptionKey(f"key id {kid!r} ({where}) must be 1-64 of A-Z a-z 0-9 . _ -")
        return kid, parse_key(material, where)
    key = parse_key(item, where)
    return key_id(key), key


class LocalKeys:
    """Keys you hold yourself: ``current`` wraps new data keys, ``current`` and every key in
    ``old`` unwrap. Rotation: make the new key current, keep the old one in ``old`` until
    ``unbroken keys rotate`` has re-wrapped every run, then drop it. A key's id is its
    fingerprint (``key_id``) unless given as ``(id, key)``."""

    def __init__(self, current: NamedKey, old: Iterable[NamedKey] = ()) -> None:
        named = [_named(current, "the current key"), *(_named(item, "an old key") for item in old)]
        self._keys = dict(reversed(named))  # the current key wins an id given twice
        self._current = named[0][0]

    @property
    def current_kid(self) -> str:
        return self._current

    @property
    def kids(self) -> list[str]:
        """Every key id this provider can unwrap under, the current one first."""
        return [self._current, *(kid for kid in self._keys if kid != self._current)]

    def wrap(self, data_key: bytes) -> dict[str, JSONValue]:
        nonce = os.urandom(12)
        wrapped = aead(self._keys[self._current]).encrypt(nonce, data_key, _WRAP_AAD)
        return {"v": 1, "kid": self._current, "alg": "A256GCM", "nonce": b64(nonce), "wrapped": b64(wrapped)}

    def unwrap(self, envelope: Envelope) -> bytes:
        kid = envelope.get("kid")
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise EncryptionKeyMissing(
                f"the data key is wrapped under key id {kid!r}, which this key provider does not hold (it holds "
                f"{', '.join(self.kids)}); add that key (as the current key or in {OLD_KEYS_ENV_VAR})"
            )
        nonce, wrapped = envelope.get("nonce"), envelope.get("wrapped")
        if envelope.get("alg") != "A256GCM" or not isinstance(nonce, str) or not isinstance(wrapped, str):
            raise WrongEncryptionKey(f"the data key envelope under key id {kid!r} is not one LocalKeys wrote")
        try:
            data_key: bytes = aead(key).decrypt(unb64(nonce), unb64(wrapped), _WRAP_AAD)
        except (DecryptFailed, ValueError):
            raise WrongEncryptionKey(
                f"the data key does not unwrap under the key given for key id {kid!r}: a wrong key under that id, or "
                "an edited envelope. Nothing was changed"
            ) from None
        return data_key

    def __repr__(self) -> str:  # never the key bytes
        return f"LocalKeys(current={self._current!r}, kids={self.kids!r})"


def key_from_file(path: str | os.PathLike[str], old: Iterable[NamedKey] = ()) -> LocalKeys:
    """``LocalKeys`` whose current key is in the file ``path`` (32 raw bytes or their base64)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidEncryptionKey(f"cannot read the encryption key file {os.fspath(path)!r}: {exc}") from exc
    material = raw if len(raw) == KEY_BYTES else raw.decode("ascii", "replace")  # raw bytes, else base64 text
    return LocalKeys(parse_key(material, f"the file {os.fspath(path)}"), old)


def _env_key(text: str, where: str) -> NamedKey:
    """``BASE64`` or ``ID:BASE64`` (base64 has no colon)."""
    kid, colon, material = text.strip().rpartition(":")
    return (kid, parse_key(material, where)) if colon else parse_key(material, where)


def keys_from_environment(environ: Mapping[str, str] | None = None) -> LocalKeys | None:
    """``LocalKeys`` from ``UNBROKEN_ENCRYPTION_KEY`` (base64) or ``UNBROKEN_ENCRYPTION_KEY_FILE``,
    with ``UNBROKEN_ENCRYPTION_OLD_KEYS``; None when neither key variable is set (no encryption)."""
    env = os.environ if environ is None else environ
    text, file = env.get(KEY_ENV_VAR, ""), env.get(KEY_FILE_ENV_VAR, "")
    if text and file:
        raise InvalidEncryptionKey(f"set {KEY_ENV_VAR} or {KEY_FILE_ENV_VAR}, not both")
    old = [_env_key(item, OLD_KEYS_ENV_VAR) for item in env.get(OLD_KEYS_ENV_VAR, "").split(",") if item.strip()]
    if text:
        return LocalKeys(_env_key(text, KEY_ENV_VAR), old)
    if file:
        return key_from_file(file, old)
    if old:
        raise InvalidEncryptionKey(f"{OLD_KEYS_ENV_VAR} is set without a current key ({KEY_ENV_VAR})")
    return None


__all__ = [
    "KEY_ENV_VAR",
    "KEY_FILE_ENV_VAR",
    "OLD_KEYS_ENV_VAR",
    "Envelope",
    "KeyProvider",
    "LocalKeys",
    "NamedKey",
    "key_from_file",
    "key_id",
    "keys_from_environment",
    "parse_key",
]
