"""A pytest plugin for tests against a real S3-compatible HTTP server.

The server is ``moto`` in server mode (``moto[server]``), started once per test session on a
free port of 127.0.0.1 in a child process, or the one named by
``UNBROKEN_TEST_S3_ENDPOINT``. The store reaches it through boto3 over HTTP, with the conditional
writes (If-None-Match, If-Match) the real services answer. Each test gets a bucket of its own.
When no server can be had, the tests are skipped with the reason, unless ``CI`` is set: then they
fail. ``moto_subprocess`` starts a server of the test's own, for tests that kill it.
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ENDPOINT_ENV_VAR = "UNBROKEN_TEST_S3_ENDPOINT"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so S3 tests must run)")
    pytest.skip(reason)


def use_test_credentials() -> None:
    """Fake AWS credentials for the test server (never real ones: the server takes any)."""
    for name, value in CREDENTIALS.items():
        os.environ[name] = value


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """A moto server in a child process on a free port (its own interpreter, so it does not
    compete with the test for the GIL), once it answers."""
    import moto.server  # noqa: F401 - fail here, clearly, when moto[server] is missing

    port = free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("moto.server did not start within 30 s")


@functools.cache
def _moto_endpoint() -> str:
    process, url = start_moto()
    atexit.register(process.kill)
    return url


def endpoint() -> str:
    """The S3 endpoint for tests: ``$UNBROKEN_TEST_S3_ENDPOINT``, else a moto server started now."""
    use_test_credentials()
    configured = os.environ.get(ENDPOINT_ENV_VAR)
    if configured:
        return configured
    try:
        return _moto_endpoint()
    except ImportError as exc:
        _skip_or_fail(f"moto[server] is not installed ({exc}); pip install -e '.[dev]'")
        raise


def client(url: str) -> Any:
    import boto3  # type: ignore[import-untyped]  # boto3 ships no type stubs

    return boto3.client("s3", endpoint_url=url, region_name="us-east-1")


def new_bucket(url: str) -> str:
    """A new, empty bucket on the server at ``url``."""
    name = f"ubt-{uuid.uuid4().hex[:16]}"
    client(url).create_bucket(Bucket=name)
    return name


def store_url(url: str, bucket: str, prefix: str = "runs") -> str:
    return f"s3://{bucket}/{prefix}?endpoint={url}"


@pytest.fixture
def s3_url() -> str:
    """A store URL in a bucket of this test's own on the test server."""
    url = endpoint()
    return store_url(url, new_bucket(url))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def moto_subprocess() -> Iterator[str]:
    """The endpoint of a moto server of this test's own (killed after the test)."""
    use_test_credentials()
    process, url = start_moto()
    yield url
    process.kill()
    process.wait(timeout=10)
