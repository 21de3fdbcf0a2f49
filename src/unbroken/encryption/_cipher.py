"""AES-256-GCM from pyca ``cryptography`` (imported on first use), and what is sealed with it.

A run's data key seals three things, each with associated data naming what it is and where it
belongs, so sealed bytes moved anywhere else do not open:

* a save record's body, associated data ``unbroken record`` NUL run id NUL seq NUL snapshot flag
  (0 or 1), in one of two forms of the same sealed bytes (nonce (12 bytes) + ciphertext + tag):
  for a store that keeps bytes as they are (SQLite), raw: ``acceptance.SEALED_RAW`` (0xFF
  ``A256GCM``), the snapshot flag (one byte, 0 or 1), the sealed bytes; for any other store,
  text: ``{"enc":"A256GCM","snapshot":true,"data":HEX}`` (``snapshot`` only on a snapshot
  record, kept clear so a store finds the newest snapshot without the key), HEX the sealed
  bytes in hex. Both forms are read wherever records are (runs written before raw records);
* a segment of save records ``first..last`` packed by a store (SQLite), as one unit: its bodies
  (``[body,body,...]``, raw bytes: nonce + ciphertext + tag), associated data ``unbroken
  segment`` NUL run id NUL first NUL last NUL the segment's clear index (first, lengths,
  snapshots, and ``codec.SEALED_SEGMENT``, the format's version), so a resume makes one AES-GCM
  call a segment instead of one a record;
* a text (a ledger result, the task in a listing): ``SEALED_PREFIX`` + base64 of nonce +
  ciphertext + tag, associated data ``unbroken`` kind NUL run id NUL position (the ledger key;
  0 for the task).

Text records are hex, not base64: CPython decodes hex ~5x faster (a resume opens every record), at
twice the ciphertext's size instead of 1.33x; raw records spare both (a 2.4 KB record stays
within one SQLite page instead of needing an overflow page). Nothing is compressed before it is sealed (the
length of a compressed record would tell what it holds).

docs/format.md and docs/security.md describe the formats for people.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

from ..acceptance import SEALED_RAW
from ..errors import EncryptionUnavailable

KEY_BYTES = 32
NONCE_BYTES = 12
SEALED_PREFIX = "unbroken:sealed:v1:"
"""How a sealed text starts (a ledger result's content, a listed task)."""
RECORD_TAG = '{"enc":"A256GCM"'
"""How a sealed record body starts (its JSON key ``enc`` marks it)."""
SNAPSHOT_FLAG = ',"snapshot":true'
_TAG_LENGTH = len(RECORD_TAG)
_RECORD_TAG_BYTES = RECORD_TAG.encode()
_DATA = b',"data":"'
_SNAPSHOT_DATA = SNAPSHOT_FLAG.encode() + _DATA


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


def _aesgcm_class() -> Any:
    """pyca's ``AESGCM``. Taken from its compiled module, which the public
    ``cryptography.hazmat.primitives.ciphers.aead.AESGCM`` re-exports (the same class, a test
    checks it), to spare the 30-60 ms its package's ``__init__`` imports besides; the public
    path when that module moves."""
    try:
        from cryptography.hazmat.bindings._rust import openssl

        return openssl.aead.AESGCM
    except (ImportError, AttributeError):
        pass
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise EncryptionUnavailable(
            f"encryption at rest needs pyca cryptography, which is not installed ({exc}): "
            "pip install 'unbroken[encryption]'"
        ) from exc
    return AESGCM


def aead(key: bytes) -> Any:
    """An AES-256-GCM cipher under ``key`` (pyca ``AESGCM``: ``encrypt``/``decrypt`` of
    (nonce, data, associated data)); ``decrypt`` raises ``DecryptFailed`` when the tag fails."""
    cipher = _aesgcm_class()(key)

    class _Checked:
        encrypt = cipher.encrypt

        @staticmethod
        def decrypt(nonce: bytes, data: bytes, associated: bytes) -> bytes:
            try:
                return cipher.decrypt(nonce, data, associated)  # type: ignore[no-any-return]
            except Exception:  # InvalidTag (or a malformed input): it does not open, whatever the cause
                raise DecryptFailed("authentication failed") from None

    return _Checked()


_PLAIN_START = _RECORD_TAG_BYTES + _DATA
_SNAPSHOT_START = _RECORD_TAG_BYTES + _SNAPSHOT_DATA
_RAW_HEADER = len(SEALED_RAW) + 1  # the tag, then the snapshot flag byte
_RAW_FLAGS = {0: False, 1: True}


class RunCipher:
    """Seals and opens one run's bodies and texts under its data key."""

    __slots__ = ("_aead", "_raw", "_run")

    def __init__(self, run_id: str, data_key: bytes) -> None:
        self._aead = aead(data_key)
        self._raw = _aesgcm_class()(data_key)  # (``open_bodies``' loop: pyca's own, no wrapper call)
        self._run = run_id.encode()

    def _record_aad(self, seq: int, snapshot: bool) -> bytes:
        return b"unbroken record\x00%s\x00%d\x00%d" % (self._run, seq, snapshot)

    def _seal_record(self, seq: int, body: str, snapshot: bool) -> bytes:
        """Nonce + ciphertext + tag of save record ``seq``; checked to open back to ``body``
        before it is returned (a few microseconds: nothing is written that this key could not read)."""
        nonce = os.urandom(NONCE_BYTES)
        plain, aad = body.encode(), self._record_aad(seq, snapshot)
        sealed: bytes = nonce + self._aead.encrypt(nonce, plain, aad)
        if self._aead.decrypt(nonce, sealed[NONCE_BYTES:], aad) != plain:
            raise DecryptFailed(f"save record {seq} does not open back to what was sealed")  # pragma: no cover
        return sealed

    def seal_record(self, seq: int, body: str, snapshot: bool) -> str:
        """The sealed body of save record ``seq``, as text (the hex envelope)."""
        flag = SNAPSHOT_FLAG if snapshot else ""
        return f'{RECORD_TAG}{flag},"data":"{self._seal_record(seq, body, snapshot).hex()}"}}'

    def seal_record_raw(self, seq: int, body: str, snapshot: bool) -> bytes:
        """The sealed body of save record ``seq``, as raw bytes (for a store that keeps bytes)."""
        return SEALED_RAW + (b"\x01" if snapshot else b"\x00") + self._seal_record(seq, body, snapshot)

    def open_record(self, seq: int, body: str | bytes) -> bytes:
        """The body sealed as record ``seq`` of this run, from its stored envelope (read by its
        fixed layout; the snapshot flag is sealed with it, so no clear field can be changed)."""
        text = body if type(body) is bytes else body.encode()  # type: ignore[union-attr]
        if text.startswith(SEALED_RAW):
            return self._open_raw(seq, text)
        snapshot = text.startswith(_SNAPSHOT_DATA, _TAG_LENGTH)
        start = _TAG_LENGTH + (len(_SNAPSHOT_DATA) if snapshot else len(_DATA))
        if not (snapshot or text.startswith(_DATA, _TAG_LENGTH)) or not text.endswith(b'"}'):
            raise DecryptFailed("its envelope is not one unbroken wrote")
        try:
            sealed = binascii.unhexlify(memoryview(text)[start:-2])
        except (binascii.Error, ValueError):
            raise DecryptFailed("its data is not hex") from None
        if len(sealed) < NONCE_BYTES + 16:
            raise DecryptFailed("sealed record is too short")
        view = memoryview(sealed)
        return self._aead.decrypt(view[:NONCE_BYTES], view[NONCE_BYTES:], self._record_aad(seq, snapshot))  # type: ignore[no-any-return]

    def _open_raw(self, seq: int, body: bytes) -> bytes:
        snapshot = _RAW_FLAGS.get(body[len(SEALED_RAW)]) if len(body) > len(SEALED_RAW) else None
        if snapshot is None:
            raise DecryptFailed("its envelope is not one unbroken wrote")
        if len(body) < _RAW_HEADER + NONCE_BYTES + 16:
            raise DecryptFailed("sealed record is too short")
        view = memoryview(body)
        nonce, sealed = view[_RAW_HEADER : _RAW_HEADER + NONCE_BYTES], view[_RAW_HEADER + NONCE_BYTES :]
        return self._aead.decrypt(nonce, sealed, self._record_aad(seq, snapshot))  # type: ignore[no-any-return]

    def open_bodies(self, buffer: bytes, index: list[tuple[int, int]]) -> list[bytes] | None:
        """The bodies sealed as records ``seq`` of this run, for ``(seq, length)`` in ``index``,
        laid out in ``buffer`` from byte 1 with one separator byte after each (a packed read, a
        segment's bodies); None unless every one opens (the caller then reads them one by one,
        the path that says which is wrong). One loop, no call per record but pyca's: a resume
        opens every record. Each is bound as ``open_record`` binds it (run id, seq, snapshot)."""
        opened: list[bytes] = []
        view, unhex, decrypt, aad = memoryview(buffer), binascii.unhexlify, self._raw.decrypt, self._record_aad
        offset, plain_skip, snapshot_skip = 1, len(_PLAIN_START), len(_SNAPSHOT_START)
        raw_skip, raw_flags, raw_min = _RAW_HEADER + NONCE_BYTES, _RAW_FLAGS, _RAW_HEADER + NONCE_BYTES + 16
        try:
            for seq, length in index:
                end = offset + length
                if buffer.startswith(SEALED_RAW, offset, end):  # raw: no hex to decode
                    snapshot = raw_flags[buffer[offset + _RAW_HEADER - 1]] if length >= raw_min else None
                    if snapshot is None:
                        return None
                    start = offset + raw_skip
                    opened.append(decrypt(view[start - NONCE_BYTES : start], view[start:end], aad(seq, snapshot)))
                    offset = end + 1
                    continue
                if buffer.startswith(_PLAIN_START, offset, end):
                    start, snapshot = offset + plain_skip, False
                elif buffer.startswith(_SNAPSHOT_START, offset, end):
                    start, snapshot = offset + snapshot_skip, True
                else:
                    return None
                if not buffer.startswith(b'"}', end - 2, end) or end - 2 - start < 2 * (NONCE_BYTES + 16):
                    return None
                sealed = unhex(view[start : end - 2])
                opened.append(decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad(seq, snapshot)))
                offset = end + 1
        except Exception:  # not hex, InvalidTag, anything else: the careful path names it
            return None
        return opened

    def _segment_aad(self, first: int, last: int, index_text: bytes) -> bytes:
        return b"unbroken segment\x00%s\x00%d\x00%d\x00%s" % (self._run, first, last, index_text)

    def seal_segment(self, first: int, last: int, index_text: bytes, bodies: bytes) -> bytes:
        """``bodies`` (records ``first..last``, described by ``index_text``) sealed as one unit:
        nonce + ciphertext + tag, raw bytes. Checked to open back before it is returned."""
        nonce = os.urandom(NONCE_BYTES)
        aad = self._segment_aad(first, last, index_text)
        sealed: bytes = nonce + self._aead.encrypt(nonce, bodies, aad)
        if self._aead.decrypt(nonce, sealed[NONCE_BYTES:], aad) != bodies:
            raise DecryptFailed(f"segment {first}..{last} does not open back to what was sealed")  # pragma: no cover
        return sealed

    def open_segment(self, first: int, last: int, index_text: bytes, sealed: bytes) -> bytes:
        """The bodies ``seal_segment`` sealed as records ``first..last`` of this run with
        ``index_text``: one AES-GCM call for the whole segment."""
        if len(sealed) < NONCE_BYTES + 16:
            raise DecryptFailed("sealed segment is too short")
        view = memoryview(sealed)
        aad = self._segment_aad(first, last, index_text)
        return self._aead.decrypt(view[:NONCE_BYTES], view[NONCE_BYTES:], aad)  # type: ignore[no-any-return]

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
    """Whether a stored body is a sealed record, either form (by its first bytes; opening decides the rest)."""
    if isinstance(body, str):
        return body.startswith(RECORD_TAG)
    return body.startswith(_RECORD_TAG_BYTES) or body.startswith(SEALED_RAW)
