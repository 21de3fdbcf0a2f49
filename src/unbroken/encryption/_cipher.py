"""AES-256-GCM from pyca ``cryptography`` (imported on first use), and what is sealed with it.

A run's data key seals three things, each with associated data naming what it is and where it
belongs, so sealed bytes moved anywhere else do not open:

* a save record's body: ``{"enc":"A256GCM","snapshot":true,"data":B64}`` (``snapshot`` only on
  a snapshot record, kept clear so a store finds the newest snapshot without the key), where
  B64 is base64 of nonce (12 bytes) + ciphertext + tag, and the associated data is
  ``unbroken record`` NUL run id NUL seq;
* a text (a ledger result, the task in a listing): ``SEALED_PREFIX`` + B64, associated data
  ``unbroken`` kind NUL run id NUL position (the ledger key; 0 for the task).

docs/format.md and docs/security.md describe the formats for people.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

from ..errors import EncryptionUnavailable

KEY_BYTES = 32
NONCE_BYTES = 12
SEALED_PREFIX = "unbroken:sealed:v1:"
"""How a sealed text starts (a ledger result's content, a listed task)."""
RECORD_TAG = '{"enc":"A256GCM"'
"""How a sealed record body starts (its JSON key ``enc`` marks it)."""


class DecryptFailed(ValueError):
    """Sealed bytes that do not open: another key, another place (run, seq, key), or edited."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | bytes) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecryptFailed(f"sealed data is not base64 ({exc})") from None


def new_data_key() -> bytes:
    """A fresh random 256-bit data key (the OS's CSPRNG)."""
    return os.urandom(KEY_BYTES)


def aead(key: bytes) -> Any:
    """An AES-256-GCM cipher under ``key`` (pyca ``AESGCM``: ``encrypt``/``decrypt`` of
    (nonce, data, associated data)); ``decrypt`` raises ``DecryptFailed`` when the tag fails."""
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise EncryptionUnavailable(
            f"encryption at rest needs pyca cryptography, which is not installed ({exc}): "
            "pip install 'unbroken[encryption]'"
        ) from exc
    cipher = AESGCM(key)

    class _Checked:
        encrypt = cipher.encrypt

        @staticmethod
        def decrypt(nonce: bytes, data: bytes, associated: bytes) -> bytes:
            try:
                return cipher.decrypt(nonce, data, associated)
            except InvalidTag:
                raise DecryptFailed("authentication failed") from None

    return _Checked()


class RunCipher:
    """Seals and opens one run's bodies and texts under its data key."""

    __slots__ = ("_aead", "_run")

    def __init__(self, run_id: str, data_key: bytes) -> None:
        self._aead = aead(data_key)
        self._run = run_id.encode()

    def _record_aad(self, seq: int) -> bytes:
        return b"unbroken record\x00" + self._run + b"\x00" + str(seq).encode()

    def seal_record(self, seq: int, body: str, snapshot: bool) -> str:
        """The sealed body of save record ``seq``; checked to open back to ``body`` before it is
        returned (a few microseconds: nothing is written that this key could not read)."""
        nonce = os.urandom(NONCE_BYTES)
        plain = body.encode()
        sealed = nonce + self._aead.encrypt(nonce, plain, self._record_aad(seq))
        if self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], self._record_aad(seq)) != plain:
            raise DecryptFailed(f"save record {seq} does not open back to what was sealed")  # pragma: no cover
        flag = ',"snapshot":true' if snapshot else ""
        return f'{RECORD_TAG}{flag},"data":"{b64(sealed)}"}}'

    def open_record(self, seq: int, data: str) -> bytes:
        """The body sealed as record ``seq`` of this run (the ``data`` of its envelope)."""
        sealed = unb64(data)
        if len(sealed) < NONCE_BYTES + 16:
            raise DecryptFailed("sealed record is too short")
        return self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], self._record_aad(seq))  # type: ignore[no-any-return]

    def _text_aad(self, kind: str, position: str) -> bytes:
        return b"unbroken " + kind.encode() + b"\x00" + self._run + b"\x00" + position.encode()

    def seal_text(self, kind: str, position: str, text: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        return SEALED_PREFIX + b64(nonce + self._aead.encrypt(nonce, text.encode(), self._text_aad(kind, position)))

    def open_text(self, kind: str, position: str, sealed_text: str) -> str:
        sealed = unb64(sealed_text[len(SEALED_PREFIX) :])
        if len(sealed) < NONCE_BYTES + 16:
            raise DecryptFailed("sealed text is too short")
        plain = self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], self._text_aad(kind, position))
        return plain.decode()  # type: ignore[no-any-return]


def is_sealed_text(text: object) -> bool:
    return isinstance(text, str) and text.startswith(SEALED_PREFIX)


def is_sealed_record(body: str | bytes) -> bool:
    """Whether a stored body is a sealed record (by its first bytes; parsing decides the rest)."""
    return body.startswith(RECORD_TAG if isinstance(body, str) else RECORD_TAG.encode())
