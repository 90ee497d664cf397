"""SSRF guard for outbound HTTP (HTTP tools, webhooks): a request may reach only globally routable
addresses, unless its host is explicitly allow-listed (the rules: shared/netguard_rules.py).

The check holds for every request, not every connection: before each request and each redirect
hop, the host is resolved once and checked under the request's own allow list, and the request
goes through the pool of exactly that checked destination (allow list, host, port, addresses;
shared/netguard_pool.py), whose connections go only to the checked addresses. A connection another
request opened under another allow list is never reused, and a resolver that answers differently
the second time (DNS rebinding) is never asked twice for one hop. The request keeps its URL, so
the Host header and the TLS server name stay the host's. Responses are read as a stream under a
byte cap and an overall deadline, so a receiver can neither make us buffer a huge body nor trickle
past a timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket
import ssl
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from shared.netguard_pool import (
    DESTINATION,
    KEEPALIVE_S,
    MAX_POOLS,
    Destination,
    GuardedTransport,
    destination_of,
)
from shared.netguard_rules import IP, METADATA, BlockedAddressError, ResponseTooLargeError, forbidden

__all__ = [
    "ANSWER_TTL_S",
    "CROSS_ORIGIN_HEADERS",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_BYTES",
    "DESTINATION",
    "IP",
    "MAX_REDIRECTS",
    "METADATA",
    "BlockedAddressError",
    "Resolver",
    "ResponseTooLargeError",
    "check_url",
    "checked_destination",
    "forbidden",
    "guarded_client",
    "guarded_request",
    "resolve_checked",
    "system_resolver",
]

Resolver = Callable[[str, int], Awaitable[list[str]]]

MAX_REDIRECTS = 5
ANSWER_TTL_S = KEEPALIVE_S  # how long a client reuses a resolver's answer (checked again each time)
MAX_ANSWERS = 256
DEFAULT_MAX_BYTES = 1_000_000
DEFAULT_DEADLINE_S = 30.0

# The resolver of each guarded client (the transport connects only where a request was checked).
_resolvers: weakref.WeakKeyDictionary[httpx.AsyncClient, Resolver] = weakref.WeakKeyDictionary()


async def system_resolver(host: str, port: int) -> list[str]:
    """The event loop's resolver (never blocking the loop)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def resolve_checked(
    host: str, port: int, allow_hosts: Collection[str] = (), resolver: Resolver = system_resolver
) -> list[str]:
    """The addresses to connect to for ``host``: resolved once; BlockedAddressError unless every
    one of them is global (or the host is allow-listed, when they are returned unchecked)."""
    host = host.strip("[]")
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = await resolver(host, port)
        except (socket.gaierror, OSError) as exc:
            raise BlockedAddressError(f"cannot resolve {host}: {exc}") from None
        addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]
    if not addresses:
        raise BlockedAddressError(f"{host} has no address")
    if host.lower() not in allow_hosts:
        for ip in addresses:
            if forbidden(ip):
                raise BlockedAddressError(
                    f"{host} resolves to {ip}, which is not a public address; allow-list the host to call it"
                )
    return [str(ip) for ip in addresses]


async def check_url(
    url: str, allow_hosts: Collection[str] = (), resolver: Resolver = system_resolver
) -> None:
    """Raise BlockedAddressError unless the URL is http(s) and its host resolves to public addresses."""
    parts = _usable(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    await resolve_checked(parts.hostname or "", port, _lower(allow_hosts), resolver)


def _usable(url: str) -> Any:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise BlockedAddressError(f"scheme {parts.scheme!r} is not allowed (http and https only)")
    if not parts.hostname:
        raise BlockedAddressError("the URL has no host")
    return parts


def _lower(hosts: Iterable[str]) -> frozenset[str]:
    return frozenset(h.strip().lower() for h in hosts if h.strip())


def guarded_client(
    *,
    max_connections: int = 100,
    max_pools: int = MAX_POOLS,
    resolver: Resolver = system_resolver,
    inner: httpcore.AsyncNetworkBackend | None = None,
    tls: ssl.SSLContext | None = None,
) -> httpx.AsyncClient:
    """An HTTP client that sends only requests checked by guarded_request, each through the pool of
    its checked destination (at most ``max_pools`` pools, ``max_connections`` requests under way;
    ``tls``: the context they verify with, else one of its own)."""
    transport = GuardedTransport(inner, max_connections=max_connections, max_pools=max_pools, tls=tls)
    client = httpx.AsyncClient(transport=transport, trust_env=False)
    _resolvers[client] = _Remembered(resolver)
    return client


class _Remembered:
    """A resolver whose answers are kept for ANSWER_TTL_S (as long as a pooled connection to them
    would have lived), so checking every request does not mean a DNS lookup for every request.
    The answers are raw: each request still checks them under its own allow list."""

    def __init__(self, resolver: Resolver, clock: Callable[[], float] = time.monotonic) -> None:
        self.resolver = resolver
        self.clock = clock
        self.answers: OrderedDict[tuple[str, int], tuple[float, list[str]]] = OrderedDict()  # when, what

    async def __call__(self, host: str, port: int) -> list[str]:
        key, now = (host, port), self.clock()
        kept = self.answers.get(key)
        if kept is not None and now - kept[0] < ANSWER_TTL_S:
            self.answers.move_to_end(key)
            return kept[1]
        found = await self.resolver(host, port)
        self.answers[key] = (now, found)
        self.answers.move_to_end(key)
        while len(self.answers) > MAX_ANSWERS:
            self.answers.popitem(last=False)
        return found


# Headers that may follow a redirect to another origin; any other (credentials, API keys a profile
# sets) is dropped there, as browsers and httpx drop Authorization.
CROSS_ORIGIN_HEADERS = frozenset(
    {"content-type", "accept", "user-agent", "idempotency-key", "agentmill-fencing-token",
     "x-agentmill-delivery", "x-agentmill-attempt", "x-agentmill-signature", "x-agentmill-unsigned"}
)  # fmt: skip


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


async def guarded_request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    allow_hosts: Collection[str] = (),
    max_bytes: int = DEFAULT_MAX_BYTES,
    deadline_s: float = DEFAULT_DEADLINE_S,
    **kwargs: Any,
) -> httpx.Response:
    """A request through a guarded client that follows redirects itself, every hop through the
    guard, and reads at most ``max_bytes`` of the final body (ResponseTooLargeError past that),
    all within ``deadline_s`` (httpx.TimeoutException past that). The body is read: no aclose needed."""
    resolver = _resolvers.get(client)
    if resolver is None:
        raise TypeError("guarded_request needs a client from netguard.guarded_client()")
    try:
        async with asyncio.timeout(deadline_s):
            return await _follow(client, resolver, _lower(allow_hosts), method, url, max_bytes, kwargs)
    except TimeoutError:
        raise httpx.ReadTimeout(
            f"no complete answer from {urlsplit(url).hostname} within {deadline_s:g} s"
        ) from None


async def checked_destination(
    client: httpx.AsyncClient, url: str, allow_hosts: Collection[str] = ()
) -> Destination:
    """Where one request to ``url`` may go through the guarded ``client`` (its host resolved once
    and checked under ``allow_hosts``): for a caller that sends the request itself, e.g. a client
    library that follows its own redirects, each hop checked again (worker/tools/mcp_transport.py).
    Put it in the request's extensions under ``DESTINATION``."""
    resolver = _resolvers.get(client)
    if resolver is None:
        raise TypeError("checked_destination needs a client from netguard.guarded_client()")
    return await _checked(url, _lower(allow_hosts), resolver)


async def _checked(url: str, allow: frozenset[str], resolver: Resolver) -> Destination:
    """Where one hop may go: its host resolved once and checked under the request's allow list."""
    _usable(url)
    dest = destination_of(httpx.URL(url), allow)
    addresses = await resolve_checked(dest.host, dest.port, allow, resolver)
    return dataclasses.replace(dest, addresses=tuple(addresses))


async def _follow(
    client: httpx.AsyncClient,
    resolver: Resolver,
    allow: frozenset[str],
    method: str,
    url: str,
    max_bytes: int,
    kwargs: dict[str, Any],
) -> httpx.Response:
    for _ in range(MAX_REDIRECTS + 1):
        dest = await _checked(url, allow, resolver)  # before any connection, new or pooled
        extensions = {**kwargs.get("extensions", {}), DESTINATION: dest}
        request = client.build_request(method, url, **{**kwargs, "extensions": extensions})
        response = await client.send(request, stream=True, follow_redirects=False)
        try:
            if response.is_redirect and "location" in response.headers:
                target = urljoin(url, response.headers["location"])
                if _origin(target) != _origin(url) and kwargs.get("headers"):
                    kept = {k: v for k, v in kwargs["headers"].items() if k.lower() in CROSS_ORIGIN_HEADERS}
                    kwargs = {**kwargs, "headers": kept}
                url = target
                if response.status_code in (301, 302, 303):
                    method = "GET"
                    kwargs = {k: v for k, v in kwargs.items() if k not in ("json", "content", "data")}
                continue
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise ResponseTooLargeError(
                        f"the response from {urlsplit(url).hostname} is over {max_bytes} bytes"
                    )
            headers = [
                (k, v)
                for k, v in response.headers.multi_items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
            ]
            return httpx.Response(response.status_code, headers=headers, content=bytes(body), request=request)
        finally:
            await response.aclose()
    raise BlockedAddressError(f"more than {MAX_REDIRECTS} redirects")
