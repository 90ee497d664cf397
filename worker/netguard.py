"""SSRF guard for outbound HTTP (HTTP tools, webhooks): refuse private, loopback, link-local and
metadata addresses unless the host is explicitly allow-listed; redirects are checked hop by hop."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Collection
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
MAX_REDIRECTS = 5


class BlockedAddressError(Exception):
    """The URL points somewhere outbound calls may not go."""


def _forbidden(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip in METADATA
        or ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_unspecified
        or ip.is_reserved
        or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)
    )


async def check_url(url: str, allow_hosts: Collection[str] = ()) -> None:
    """Raise BlockedAddressError unless every address the URL's host resolves to is public
    (or the host is allow-listed). Resolution uses the event loop's resolver, never blocking."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise BlockedAddressError(f"scheme {parts.scheme!r} is not allowed (http and https only)")
    host = parts.hostname
    if not host:
        raise BlockedAddressError("the URL has no host")
    if host in allow_hosts:
        return
    try:
        literal = ipaddress.ip_address(host)
        addresses = [literal]
    except ValueError:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM
            )
        except socket.gaierror as exc:
            raise BlockedAddressError(f"cannot resolve {host}: {exc}") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for ip in addresses:
        if _forbidden(ip):
            raise BlockedAddressError(
                f"{host} resolves to {ip}, a private or reserved address; allow-list the host to call it"
            )


# Headers that may follow a redirect to another origin; any other (credentials, API keys a profile
# sets) is dropped there, as browsers and httpx drop Authorization.
CROSS_ORIGIN_HEADERS = frozenset(
    {"content-type", "accept", "user-agent", "idempotency-key",
     "x-agentmill-delivery", "x-agentmill-attempt", "x-agentmill-signature"}
)  # fmt: skip


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


async def guarded_request(
    client: httpx.AsyncClient, method: str, url: str, *, allow_hosts: Collection[str] = (), **kwargs: Any
) -> httpx.Response:
    """A request that follows redirects itself, checking every hop with check_url."""
    for _ in range(MAX_REDIRECTS + 1):
        await check_url(url, allow_hosts)
        response = await client.request(method, url, follow_redirects=False, **kwargs)
        if response.is_redirect and "location" in response.headers:
            await response.aclose()
            target = urljoin(url, response.headers["location"])
            if _origin(target) != _origin(url) and kwargs.get("headers"):
                kept = {k: v for k, v in kwargs["headers"].items() if k.lower() in CROSS_ORIGIN_HEADERS}
                kwargs = {**kwargs, "headers": kept}
            url = target
            if response.status_code in (301, 302, 303):
                method, kwargs = (
                    "GET",
                    {k: v for k, v in kwargs.items() if k not in ("json", "content", "data")},
                )
            continue
        return response
    raise BlockedAddressError(f"more than {MAX_REDIRECTS} redirects")
