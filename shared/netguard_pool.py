"""The guarded client's transport: one connection pool per checked destination, so a connection is
reused only by a request the guard has checked to the same end.

A connection pool keyed by origin alone lets a request ride on a connection that another request
(another tool, allow-listed where this one is not) opened to the same origin: the check made when
the connection opened would not hold for it. Here every request names its destination, as checked
by the guard just before (``Destination``: the allow list it was checked under, scheme, host, port
and the addresses found), and goes through the pool of exactly that destination, whose connections
go only to those addresses. A request that names no destination is refused.

Pools are kept in a bounded LRU; the one evicted is closed as soon as its last response is closed
(at once when idle). Closing the transport closes them all. At most ``max_connections`` requests are
under way in all pools together (one pool had that bound before), the others wait their turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from shared.netguard_rules import BlockedAddressError

__all__ = ["DESTINATION", "KEEPALIVE_S", "MAX_POOLS", "Destination", "GuardedTransport", "destination_of"]

DESTINATION = "agentmill.destination"  # the request extension naming its checked Destination
MAX_POOLS = 64  # destinations with a pool of their own; the least recently used is closed past that
KEEPALIVE_S = 5.0


@dataclass(frozen=True, slots=True)
class Destination:
    """Where the guard allowed a request to go, and under which allow list."""

    allow: frozenset[str]
    scheme: str
    host: str  # lower case, no brackets
    port: int
    addresses: tuple[str, ...]  # checked (or allow-listed) addresses, in the resolver's order

    def key(self) -> tuple[frozenset[str], str, str, int, frozenset[str]]:
        return self.allow, self.scheme, self.host, self.port, frozenset(self.addresses)


def destination_of(url: httpx.URL, allow: frozenset[str]) -> Destination:
    """Where a URL goes, named as httpcore will name it to the network backend (ASCII host)."""
    host = url.raw_host.decode("ascii").lower()
    return Destination(allow, url.scheme, host, url.port or (443 if url.scheme == "https" else 80), ())


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to its destination's checked addresses (TLS still names the host)."""

    def __init__(self, dest: Destination, inner: httpcore.AsyncNetworkBackend) -> None:
        self.dest = dest
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if (host.lower(), port) != (self.dest.host, self.dest.port):
            raise BlockedAddressError(f"{host}:{port} was not checked (this pool is {self.dest.host})")
        last: Exception | None = None
        for address in self.dest.addresses[:4]:
            try:
                return await self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedAddressError("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _Pool:
    """One destination's transport and the responses still open on it."""

    def __init__(
        self,
        dest: Destination,
        inner: httpcore.AsyncNetworkBackend,
        ssl_context: ssl.SSLContext,
        max_connections: int,
    ) -> None:
        self.transport = httpx.AsyncHTTPTransport(verify=ssl_context)  # given a context, httpx builds none
        self.transport._pool = httpcore.AsyncConnectionPool(  # httpx has no public way to set the backend
            ssl_context=ssl_context,
            max_connections=max_connections,
            max_keepalive_connections=min(8, max_connections),
            keepalive_expiry=KEEPALIVE_S,
            network_backend=_PinnedBackend(dest, inner),
        )
        self.open = 0  # responses not yet closed
        self.retired = False  # evicted from the LRU: closed when open falls to 0
        self.closed = False


class _Released(httpx.AsyncByteStream):
    """A response body that tells its pool when it is closed."""

    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], Awaitable[None]]) -> None:
        self.inner = inner
        self.release = release
        self.done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if not self.done:
                self.done = True
                await self.release()


class GuardedTransport(httpx.AsyncBaseTransport):
    """Routes each request to the pool of the destination the guard checked for it."""

    def __init__(
        self,
        inner: httpcore.AsyncNetworkBackend | None = None,
        *,
        max_connections: int = 100,
        max_pools: int = MAX_POOLS,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.inner = inner or httpcore.AnyIOBackend()
        # One for all pools: building one loads the CA bundle (tens of ms of CPU, on the event loop).
        self.ssl_context = tls or httpx.create_ssl_context()
        self.max_connections = max_connections
        self.slots = asyncio.Semaphore(max_connections)  # requests under way, in all pools together
        self.max_pools = max_pools
        self.pools: OrderedDict[tuple[Any, ...], _Pool] = OrderedDict()
        self.retired: set[_Pool] = set()  # evicted, closed when their last response is

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        dest = request.extensions.get(DESTINATION)
        if not isinstance(dest, Destination):
            raise BlockedAddressError("a guarded client sends only requests checked by guarded_request")
        if destination_of(request.url, dest.allow) != dataclasses.replace(dest, addresses=()):
            raise BlockedAddressError(f"{request.url.host} is not the destination that was checked")
        await self.slots.acquire()
        pool = await self._pool(dest)
        pool.open += 1

        async def release() -> None:
            self.slots.release()
            pool.open -= 1
            await self._close_if_idle(pool)

        try:
            response = await pool.transport.handle_async_request(request)
        except BaseException:
            await release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Released(response.stream, release),
            extensions=response.extensions,
        )

    async def _pool(self, dest: Destination) -> _Pool:
        key = dest.key()
        pool = self.pools.get(key)
        if pool is not None:
            self.pools.move_to_end(key)
            return pool
        pool = self.pools[key] = _Pool(dest, self.inner, self.ssl_context, self.max_connections)
        while len(self.pools) > self.max_pools:
            _, old = self.pools.popitem(last=False)
            old.retired = True
            self.retired.add(old)
            await self._close_if_idle(old)
        return pool

    async def _close_if_idle(self, pool: _Pool) -> None:
        if pool.retired and pool.open == 0 and not pool.closed:
            pool.closed = True
            self.retired.discard(pool)
            await pool.transport.aclose()

    async def aclose(self) -> None:
        pools = [*self.pools.values(), *self.retired]
        self.pools.clear()
        self.retired.clear()
        for pool in pools:
            pool.closed = True
            await pool.transport.aclose()
