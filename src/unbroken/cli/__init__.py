"""The ``unbroken`` command line, built only on the public API. Each module adds its commands
to the group in ``_app``."""

from __future__ import annotations

from . import runs  # noqa: F401  (registers commands)
from ._app import main

__all__ = ["main"]
