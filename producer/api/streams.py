"""Bounds on long-lived requests (SSE streams, long-polls): per tenant and per process.

Each holds a connection of the API's blocking-read Redis pool while it waits, so without a bound
one tenant's streams could take every connection and every file descriptor. Beyond a bound the
request gets 429 with Retry-After.

On SIGTERM uvicorn waits for every open request to end before it exits; a stream that follows a
run would hold it until the run ended. So the server sets the app's ``closing`` event
(producer/api/serve.py) and each stream's waits race it (``unless_closing``): the streams end
cleanly (an SSE stream after the events already sent, a long-poll with the run as it is) at once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from agentmill_client.errors import ApiError

__all__ = ["LONG_POLL", "SSE", "Slot", "SlotStreamingResponse", "StreamLimiter"]

SSE = "sse"  # the kinds of stream a slot holds (counted apart for /metrics)
LONG_POLL = "long_poll"


class Slot:
    """One admitted stream; release() is idempotent."""

    def __init__(self, limiter: StreamLimiter, tenant: str, kind: str) -> None:
        self.limiter = limiter
        self.tenant = tenant
        self.kind = kind
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.limiter.release(self.tenant, self.kind)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class StreamLimiter:
    def __init__(self, per_tenant: int, total: int) -> None:
        self.per_tenant = per_tenant
        self.total = total
        self.open = 0
        self.by_tenant: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()

    def open_of(self, kind: str) -> int:
        """The slots of this kind (SSE, LONG_POLL) held now."""
        return self.by_kind[kind]

    def acquire(self, tenant: str, kind: str = LONG_POLL) -> Slot:
        if self.by_tenant[tenant] >= self.per_tenant:
            raise ApiError(
                429, "too_many_streams",
                f"this tenant has {self.per_tenant} open event streams and long-polls; close one or retry later",
                headers={"Retry-After": "5"},
            )  # fmt: skip
        if self.open >= self.total:
            raise ApiError(
                429, "too_many_streams",
                f"this API process holds {self.total} open event streams and long-polls; retry later",
                headers={"Retry-After": "5"},
            )  # fmt: skip
        self.open += 1
        self.by_tenant[tenant] += 1
        self.by_kind[kind] += 1
        return Slot(self, tenant, kind)

    def release(self, tenant: str, kind: str) -> None:
        self.open -= 1
        self.by_kind[kind] -= 1
        self.by_tenant[tenant] -= 1
        if self.by_tenant[tenant] <= 0:
            del self.by_tenant[tenant]


class SlotStreamingResponse(StreamingResponse):
    """A streaming response that gives its slot back however the stream ends."""

    def __init__(self, content: Any, slot: Slot, **kw: Any) -> None:
        super().__init__(content, **kw)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()
