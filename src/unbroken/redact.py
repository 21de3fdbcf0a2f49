"""What the library logs of an exception a user's code raised: its type and a short message
with anything that looks like a secret masked. The full message and traceback go to DEBUG.

A tool's exception message is often the worst place a secret lands (a connection string with
its password, a request with its bearer token, a key echoed by an API that rejected it), and
logs travel further than the store: to terminals, log shippers and bug reports.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from ._log import DEBUG, ERROR

if TYPE_CHECKING:
    import logging

MESSAGE_LIMIT = 200
"""Characters of an exception's message kept in an ERROR line (the rest is at DEBUG)."""

MASK = "[redacted]"


@functools.cache
def _secrets() -> list[re.Pattern[str]]:
    """Things that look like credentials. Each pattern's group "keep" (when present) stays
    visible so the line still says what kind of thing was there. Compiled on first use, not at
    import: a run that never logs a failure never pays for them (issue 24)."""
    return [
        # URL userinfo: scheme://user:password@host
        re.compile(r"(?P<keep>[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+(?=@)", re.IGNORECASE),
        # Authorization headers and "bearer xyz"
        re.compile(r"(?P<keep>\b(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE),
        # key=value / key: value / "key": "value" for names that say secret
        re.compile(
            r"(?P<keep>\b[\w-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
            r"|credential|auth)[\w-]*[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&}]+",
            re.IGNORECASE,
        ),
        # Well-known key shapes: OpenAI/Anthropic sk-..., GitHub, Slack, AWS access key ids, JWTs
        re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"),
        re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
        re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        # Any other long run of key-like characters (hex or base64 of 32+): likely a key or token
        re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}={0,2}(?![A-Za-z0-9+/_-])"),
    ]


def redact(text: str) -> str:
    """``text`` with everything that looks like a password, key or token replaced by ``[redacted]``."""
    for pattern in _secrets():
        text = pattern.sub(lambda match: (match.groupdict().get("keep") or "") + MASK, text)
    return text


def describe(exc: BaseException, limit: int = MESSAGE_LIMIT) -> str:
    """``Type: message`` with the message on one line, redacted, and cut to ``limit`` characters."""
    message = " ".join(str(exc).split())
    if len(message) > limit:
        message = message[:limit] + f"… ({len(message) - limit} more characters at DEBUG)"
    message = redact(message)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def log_failure(logger: logging.Logger, what: str, exc: BaseException, level: int = ERROR) -> None:
    """Log ``what`` with ``describe(exc)`` at ``level``; the full message and traceback only at
    DEBUG (a developer turns it on; a production log never holds the raw text by default)."""
    logger.log(level, "%s: %s", what, describe(exc))
    if logger.isEnabledFor(DEBUG):
        logger.debug("%s: full exception", what, exc_info=exc)
