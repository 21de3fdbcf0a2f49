"""Starting ``unbroken ui`` as a user does (a child process of the real command) and talking to it."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from webdriver import free_port


@dataclass
class Server:
    process: subprocess.Popen[str]
    base: str
    """http://127.0.0.1:PORT (no trailing slash)."""
    token: str | None
    """The action token the command printed (None when actions are off)."""

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


def start_server(store_url: str, *, actions: bool) -> Server:
    port = free_port()
    args = [sys.executable, "-m", "unbroken.cli", "ui", "--store", store_url, "--port", str(port)]
    if actions:
        args.append("--enable-actions")
    env = {key: value for key, value in os.environ.items() if key != "UNBROKEN_CRASH_AT"}
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 30)
    line = process.stdout.readline() if ready else ""
    if not line.startswith("unbroken ui: http://"):
        process.kill()
        _, err = process.communicate(timeout=10)  # also closes the pipes
        raise AssertionError(f"`unbroken ui` did not start: {line!r} {err}")
    url = line.split()[2]
    token = url.split("#token=", 1)[1] if "#token=" in url else None
    server = Server(process, f"http://127.0.0.1:{port}", token)
    deadline = time.monotonic() + 30
    while True:  # uvicorn binds right after the line is printed
        try:
            with urllib.request.urlopen(server.base + "/static/style.css", timeout=30):
                return server  # (not an API call: that would warm the server's caches)
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                server.stop()
                raise
            time.sleep(0.05)


def request(
    server: Server, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """One HTTP request; returns (status, parsed JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    sent = urllib.request.Request(server.base + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(sent, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def action_headers(server: Server, **extra: str) -> dict[str, str]:
    """What the page sends with an action: JSON, the token, same-origin."""
    headers = {"Content-Type": "application/json", "X-Unbroken-Token": server.token or "", "Origin": server.base}
    headers.update(extra)
    return headers
