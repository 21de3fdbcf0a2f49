"""The ``unbroken`` command line, built only on the public API. Each module adds its commands
to the group in ``_app``; optional command modules register themselves when present."""

from __future__ import annotations

import importlib

from . import drive, effects, runs  # noqa: F401  (registers commands)
from ._app import main

_OPTIONAL_COMMAND_MODULES = (
    "fleet",
    "chaos",
    "simulate",
    "recover",
    "approvals",
    "fork",
    "watch",
    "ui",
    "erase",
    "keys",
)

for _name in _OPTIONAL_COMMAND_MODULES:
    _module = f"{__name__}.{_name}"
    try:
        importlib.import_module(_module)
    except ModuleNotFoundError as exc:
        if exc.name != _module:  # the module exists but something it imports is missing: say so
            raise

__all__ = ["main"]
