"""``unbroken ui``: the run inspector in a browser (needs the ``unbroken[ui]`` extra)."""

from __future__ import annotations

import sys

import click

from ..errors import ConfigError
from ..ops import open_existing_store
from ._app import friendly_errors, main, store_option
from ._render import echo


@main.command("ui")
@store_option
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. Anything but 127.0.0.1/localhost exposes your runs to the network.",
)
@click.option(
    "--enable-actions",
    is_flag=True,
    help="Allow resolve, approve, deny, fork and export from the page (a per-start token guards them).",
)
@click.option(
    "--allow-host",
    "allowed_hosts",
    multiple=True,
    help="A Host name the server answers to besides its address and localhost (a DNS name, a proxy's). Repeatable.",
)
@click.option(
    "--token",
    envvar="UNBROKEN_UI_TOKEN",
    default=None,
    help="The access token (or $UNBROKEN_UI_TOKEN; default: a new random one, printed once in the URL).",
)
@friendly_errors
def ui_command(
    store_url: str, port: int, host: str, enable_actions: bool, allowed_hosts: tuple[str, ...], token: str | None
) -> None:
    """Inspect runs in a browser: the runs list, each run's save points, crashes, conversation
    and effect ledger, live. Read-only unless started with --enable-actions. On an address other
    than loopback every read needs the token, and only the names it is told answer."""
    try:
        from ..ui.server import serve
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"`unbroken ui` needs the ui extra ({exc.name} is not installed): pip install 'unbroken[ui]'"
        ) from exc

    def announce(line: str) -> None:
        echo(line)
        sys.stdout.flush()

    with open_existing_store(store_url) as store:
        serve(
            store,
            host=host,
            port=port,
            actions=enable_actions,
            announce=announce,
            token=token,
            allowed_hosts=allowed_hosts,
        )
