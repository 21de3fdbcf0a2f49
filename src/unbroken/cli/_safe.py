"""The one rule for stored text shown in a terminal: :func:`clean`. ``_render`` (every console)
and ``_app`` (error lines) apply it; nothing else in the CLI decides what is safe to print."""

from __future__ import annotations

import re

# What stored text may never send to a terminal: C0 controls but tab and newline (ESC starts
# CSI/OSC sequences: colours, cursor moves, titles, OSC 8 links, OSC 52 clipboard writes; CR
# and backspace overwrite what was printed), DEL, C1 controls (U+009B is a one-byte CSI on some
# terminals, U+009D an OSC) and the bidi embeddings, overrides and isolates that reorder a line.
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def clean(text: str) -> str:
    """``text`` with every character that could drive a terminal shown as a visible escape
    (ESC becomes the four characters ``\\x1b``, U+202E becomes ``\\u202e``): the operator sees
    that something was there and what, and the terminal receives none of it. Tab and newline
    stay. Idempotent: clean text comes back unchanged."""
    return UNSAFE.sub(_visible, text) if UNSAFE.search(text) else text


# In a JSON document these characters can only sit inside strings, where ``\\uXXXX`` is the
# same value: a document written to a terminal is escaped this way and stays importable.
_UNSAFE_IN_JSON = re.compile(r"[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def json_for_terminal(document_text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``, which escapes C0 controls
    already) with DEL, C1 and bidi controls written as ``\\uXXXX`` escapes: the same value."""
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", document_text)
