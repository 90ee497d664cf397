"""SSRF guard for outbound HTTP (HTTP tools, webhooks): a request may reach only globally routable
addresses, unless its host is explicitly allow-listed.

The check and the connection are one step: the guarded client's network backend resolves the
host once, refuses the connection unless every address is global (``ip.is_global``, and never a
cloud metadata address), and connects to the address it checked. The request keeps its URL, so
the Host header and the TLS server name stay the host's; a resolver that answers differently the
second time (DNS rebinding) is never asked twice. Redirects are followed here, hop by hop, each hop
a new connection through the same backend. Responses are read as a stream under a byte cap and an
overall deadline, so a receiver can neither make us buffer a huge body nor trickle past a timeout.
"""

from __future__ import annotations

import asyncio
import contextvars
import ipaddress
import socket
import weakref
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

__all__ = [
    "CROSS_ORIGIN_HEADERS",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_BYTES",
    "IP",
    "MAX_REDIRECTS",
    "METADATA",
    "BlockedAddressError",
    "GuardedBackend",
    "Resolver",
    "ResponseTooLargeError",
    "check_url",
    "guarded_client",
    "guarded_request",
    "resolve_checked",
    "system_resolver",
]

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "192.0.0.192")
)
MAX_REDIRECTS = 5
DEFAULT_MAX_BYTES = 1_000_000
DEFAULT_DEADLINE_S = 30.0

# The allow list of the request under way (set by guarded_request, read where it connects).
_allowed: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "netguard_allowed", default=frozenset()
)
_guarded_clients: weakref.WeakSet[httpx.AsyncClient] = weakref.WeakSet()


class BlockedAddressError(Exception):
    """The URL points somewhere outbound calls may not go."""


class ResponseTooLargeError(Exception):
    """The response body went over the byte cap (the connection was closed there)."""


def _forbidden(ip: IP) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip in METADATA or not ip.is_global or ip.is_multicast


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
            if _forbidden(ip):
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


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves and checks the host, then connects to the checked address (TLS still names the host)."""

    def __init__(
        self, resolver: Resolver = system_resolver, inner: httpcore.AsyncNetworkBackend | None = None
    ):
        self.resolver = resolver
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await resolve_checked(host, port, _allowed.get(), self.resolver)
        last: Exception | None = None
        for address in addresses[:4]:
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


def guarded_client(
    *,
    max_connections: int = 100,
    resolver: Resolver = system_resolver,
    inner: httpcore.AsyncNetworkBackend | None = None,
) -> httpx.AsyncClient:
    """An HTTP client whose every connection goes through the guard; use it with guarded_request."""
    transport = httpx.AsyncHTTPTransport()
    transport._pool = httpcore.AsyncConnectionPool(  # httpx has no public way to set the backend
        ssl_context=httpx.create_ssl_context(),
        max_connections=max_connections,
        max_keepalive_connections=min(20, max_connections),
        keepalive_expiry=5.0,
        network_backend=GuardedBackend(resolver, inner),
    )
    client = httpx.AsyncClient(transport=transport, trust_env=False)
    _guarded_clients.add(client)
    return client


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
    if client not in _guarded_clients:
        raise TypeError("guarded_request needs a client from netguard.guarded_client()")
    token = _allowed.set(_lower(allow_hosts))
    try:
        async with asyncio.timeout(deadline_s):
            return await _follow(client, method, url, max_bytes, kwargs)
    except TimeoutError:
        raise httpx.ReadTimeout(
            f"no complete answer from {urlsplit(url).hostname} within {deadline_s:g} s"
        ) from None
    finally:
        _allowed.reset(token)


async def _follow(
    client: httpx.AsyncClient, method: str, url: str, max_bytes: int, kwargs: dict[str, Any]
) -> httpx.Response:
    for _ in range(MAX_REDIRECTS + 1):
        _usable(url)
        request = client.build_request(method, url, **kwargs)
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
