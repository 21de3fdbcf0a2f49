"""The ``unbroken`` command group and what every command shares: the ``--store`` option and
turning user errors into one clear line (exit status 2) instead of a traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..errors import UnbrokenError
from ..stores import DEFAULT_STORE_URL, STORE_ENV_VAR, Store, open_store
from ._safe import clean

F = TypeVar("F", bound=Callable[..., Any])
AGENT_HELP = (
    "module:attr or path/to/file.py:attr naming an Agent, or a function returning one "
    "that takes no arguments or takes the store."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="unbroken")
def main() -> None:
    """unbroken: LLM agent runs that survive crashes."""


def store_option(fn: F) -> F:
    """Add ``--store URL`` (default ``$UNBROKEN_STORE``, else a SQLite file in the working directory)."""
    return click.option(
        "--store",
        "store_url",
        envvar=STORE_ENV_VAR,
        default=DEFAULT_STORE_URL,
        show_default=True,
        help=f"Store URL (or ${STORE_ENV_VAR}): sqlite:///file.db, file:///dir, postgresql://...",
    )(fn)


def friendly_errors(fn: F) -> F:
    """Print an ``UnbrokenError`` as one line on stderr and exit 2, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UnbrokenError as exc:
            click.echo(clean(f"error: {exc}"), err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def open_cli_store(url: str) -> Store:
    return open_store(url)
