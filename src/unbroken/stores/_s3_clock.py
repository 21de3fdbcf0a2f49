"""The S3 service's clock, read from the ``Date`` header of every response.

A run's lease on S3 is judged by the service's clock, never this machine's wall clock (which an
NTP step or a VM resume moves). Each response says the service's time to the whole second; its
request was sent and its answer received at known moments of this process's monotonic clock, so
the service's time minus the monotonic clock lies in ``[date - received, date + 1 - sent]``.
Every response narrows that interval; one that does not fit it (the service's clock stepped)
starts a new one. ``now()`` is the monotonic clock plus the interval's middle: no step of this
machine's wall clock moves it, and it follows the service from one request to the next.
"""

from __future__ import annotations

import email.utils
import threading
from typing import Any

from .. import clock


class ServiceClock:
    """The service's time, as last seen in its responses (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._low = float("-inf")  # bounds of (service time - monotonic time)
        self._high = float("inf")

    def observe(self, sent: float, received: float, date: str | None) -> None:
        """A response with ``Date: date``, to a request sent at ``sent`` and answered at
        ``received`` (this process's monotonic clock)."""
        if not date:
            return
        try:
            server = email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return
        low, high = server - received, server + 1 - sent
        with self._lock:
            if low > self._high or high < self._low:  # does not fit: the service's clock stepped
                self._low, self._high = low, high
            else:
                self._low, self._high = max(self._low, low), min(self._high, high)

    @property
    def known(self) -> bool:
        return self._low != float("-inf")

    def now(self) -> float:
        """Now on the service's clock (to within about a second); this machine's wall clock
        until a response has been seen."""
        with self._lock:
            if self._low == float("-inf"):
                return clock.wall()
            return clock.monotonic() + (self._low + self._high) / 2

    def watch(self, client: Any) -> None:
        """Observe every response ``client`` (a boto3 S3 client) receives, errors included."""

        def before(context: dict[str, Any], **_: Any) -> None:
            context["unbroken_sent"] = clock.monotonic()

        def after(http_response: Any, context: dict[str, Any], **_: Any) -> None:
            sent = context.get("unbroken_sent")
            if sent is not None:
                self.observe(sent, clock.monotonic(), http_response.headers.get("Date"))

        client.meta.events.register("before-call.s3", before)
        client.meta.events.register("after-call.s3", after)
