"""A minimal W3C WebDriver client over the standard library, for Debian's chromium-driver.

Just what the inspector's tests need: open a page, find elements by CSS, click, type, read
text, run a script, take a screenshot. Each call is one HTTP request to chromedriver.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
]


class WebDriverError(AssertionError):
    """chromedriver answered with an error."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Browser:
    """One headless Chromium session driven through chromedriver (started and stopped here)."""

    def __init__(self) -> None:
        for binary in (CHROMEDRIVER, CHROMIUM):
            if not Path(binary).exists():
                raise AssertionError(f"{binary} is missing: apt-get install -y chromium chromium-driver")
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="unbroken-chromium-")
        self.driver = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except (OSError, WebDriverError):
                pass
            if time.monotonic() > deadline:
                self.driver.kill()
                raise AssertionError("chromedriver did not start within 20 s")
            time.sleep(0.05)
        options = {"binary": CHROMIUM, "args": [*FLAGS, f"--user-data-dir={self.profile}"]}
        capabilities = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
        self.session = self._call("POST", "/session", {"capabilities": capabilities})["sessionId"]

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as exc:
            raise WebDriverError(f"{method} {path}: {exc.read().decode(errors='replace')[:500]}") from exc

    def _session(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self._session("POST", "/url", {"url": url})

    def find_all(self, css: str) -> list[str]:
        found = self._session("POST", "/elements", {"using": "css selector", "value": css})
        return [item[ELEMENT] for item in found]

    def wait(self, css: str, timeout: float = 10.0) -> str:
        """The first element matching ``css``, waiting up to ``timeout`` seconds for it."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.find_all(css)
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no element {css!r} after {timeout} s; page text: {self.text('body')[:800]}")
            time.sleep(0.05)

    def wait_until(self, script: str, timeout: float = 10.0) -> Any:
        """Wait until the JavaScript expression ``script`` is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.execute(f"return ({script});")
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"still false after {timeout} s: {script}")
            time.sleep(0.05)

    def click(self, css: str) -> None:
        self._session("POST", f"/element/{self.wait(css)}/click", {})

    def type(self, css: str, text: str) -> None:
        self._session("POST", f"/element/{self.wait(css)}/value", {"text": text})

    def text(self, css: str) -> str:
        element = self.wait(css)
        return str(self._session("GET", f"/element/{element}/text"))

    def execute(self, script: str, *args: Any) -> Any:
        return self._session("POST", "/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self._session("GET", "/screenshot")))

    def quit(self) -> None:
        with contextlib.suppress(OSError, WebDriverError):
            self._session("DELETE", "")
        self.driver.terminate()
        try:
            self.driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.driver.kill()
            self.driver.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
