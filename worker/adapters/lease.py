"""The worker's own lease deadline, and the guard that keeps a worker past it from causing effects.

Redis decides when a worker's lease has expired (its lease key on each partition expires by
Redis's clock); after that the reconciler may hand the worker's runs to another worker. A worker that was paused
(SIGSTOP, a long GC, a frozen VM) does not know it was paused, so it keeps its own deadline on the
monotonic clock: the send time of the last acknowledged beat plus the lease, minus a margin. The
beat is executed no earlier than it was sent, so this deadline falls before Redis's expiry.

Past the deadline the worker starts no tool call, model call or HTTP request and writes nothing.
For HTTP the check sits at the last point httpx lets us in: the network stream's ``write``, after
the connection is obtained (new or pooled) and before the request's bytes go out, so a pause during
connect or in a connection pool queue is caught when the worker wakes.
"""

from __future__ import annotations

import ssl
import time
import typing
from collections.abc import Callable, Iterable

import httpcore
import httpx

__all__ = ["LeaseBackend", "LeaseExpiredError", "WorkerLease", "add_lease_hook", "lease_guarded_client"]


class LeaseExpiredError(Exception):
    """This worker is past its lease deadline: it must not start effects or write."""


class WorkerLease:
    """The monotonic-clock deadline of one worker's lease. ``clock`` is injectable for tests."""

    def __init__(self, lease_ms: int, margin_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        if margin_ms >= lease_ms:
            raise ValueError(
                f"the lease margin ({margin_ms} ms) must be shorter than the lease ({lease_ms} ms)"
            )
        self.lease_s = lease_ms / 1000.0
        self.margin_s = margin_ms / 1000.0
        self.clock = clock
        self.deadline = float("-inf")  # no acknowledged beat yet: no lease

    def now(self) -> float:
        return self.clock()

    def renewed(self, sent_at: float) -> None:
        """A beat sent at ``sent_at`` (this clock) was acknowledged by Redis. A deadline that has
        already passed stays passed: runs may have stopped on it without writing (and without being
        handed back), so the worker must take a new lease id (the heartbeat finds it expired), which
        lets the old one lapse in Redis and the reconciler redispatch those runs."""
        if self.deadline != float("-inf") and self.clock() >= self.deadline:
            return
        self.deadline = max(self.deadline, sent_at + self.lease_s - self.margin_s)

    def lapse(self) -> None:
        """Forget the deadline (the lease was found lost)."""
        self.deadline = float("-inf")

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def check(self, what: str) -> None:
        if self.clock() >= self.deadline:
            raise LeaseExpiredError(f"worker lease expired: not starting {what}")


class _GuardedStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream, lease: WorkerLease) -> None:
        self.inner = inner
        self.lease = lease

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 - httpcore's signature
        return await self.inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's signature
        self.lease.check("an HTTP request")  # the last moment before the bytes go out
        await self.inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
    ) -> httpcore.AsyncNetworkStream:
        self.lease.check("a TLS handshake")
        return _GuardedStream(await self.inner.start_tls(ssl_context, server_hostname, timeout), self.lease)

    def get_extra_info(self, info: str) -> typing.Any:
        return self.inner.get_extra_info(info)


class LeaseBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend whose streams check the lease before every write."""

    def __init__(self, lease: WorkerLease, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.lease = lease
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _GuardedStream(stream, self.lease)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _GuardedStream(await self.inner.connect_unix_socket(path, timeout, socket_options), self.lease)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def lease_guarded_client(
    lease: WorkerLease, limits: httpx.Limits, tls: ssl.SSLContext | None = None
) -> httpx.AsyncClient:
    """The worker's HTTP client: every request checks the lease before it starts (an event hook,
    which also covers proxied requests) and again right before its bytes are written. ``tls``: the
    context its connections verify with (building one loads the CA bundle: about 25 ms)."""
    tls = tls or httpx.create_ssl_context()
    transport = httpx.AsyncHTTPTransport(limits=limits, verify=tls)  # given a context, httpx builds none
    # httpx has no parameter for the network backend; its transport is a thin wrapper of this pool.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=tls,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=LeaseBackend(lease),
    )

    return add_lease_hook(httpx.AsyncClient(transport=transport, limits=limits), lease)


def add_lease_hook(client: httpx.AsyncClient, lease: WorkerLease) -> httpx.AsyncClient:
    """Check the lease when a request starts, before any connection is looked for."""

    async def before_request(request: httpx.Request) -> None:
        lease.check(f"{request.method} {request.url.host}")

    client.event_hooks = {**client.event_hooks, "request": [*client.event_hooks["request"], before_request]}
    return client
