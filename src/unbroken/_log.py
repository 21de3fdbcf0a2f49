"""The library's logger (``logging.getLogger("unbroken")``), reached on first use.

``logging`` imports ``traceback``, ``string``, ``threading``-aware handlers and more: ~5 ms a
fresh process pays before its first line of work. A resume logs nothing on its way to the model
request (issue 24), so the modules on that path log through ``log`` here, which imports
``logging`` the first time one of its methods is used and is the real logger from then on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

NAME = "unbroken"
ERROR = 40
"""``logging.ERROR`` (the same number: ``logging`` defines it so and never changes it)."""
DEBUG = 10
"""``logging.DEBUG``."""


class _FirstUse:
    """Stands for the logger until a method of it is used; then asks ``logging`` for it."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        import logging

        return getattr(logging.getLogger(NAME), name)

    def __repr__(self) -> str:
        return f"<the {NAME!r} logger, created on first use>"


if TYPE_CHECKING:
    import logging

    log: logging.Logger
else:
    log = _FirstUse()
