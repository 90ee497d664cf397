"""Which addresses outbound calls may reach: globally routable ones, never a cloud metadata address,
and an IPv6 address that carries an IPv4 one (mapped, IPv4-compatible, NAT64, 6to4, Teredo) only
if the IPv4 address it carries may be reached. Pure: no I/O.

Python's ``is_global`` judges such an IPv6 address by its own prefix (``64:ff9b::7f00:1`` is global
to it, though a NAT64 gateway turns it into 127.0.0.1), so the carried address is decoded and
judged instead.
"""

from __future__ import annotations

import ipaddress

__all__ = ["IP", "METADATA", "BlockedAddressError", "ResponseTooLargeError", "carried_ipv4", "forbidden"]

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "192.0.0.192")
)

# IPv6 prefixes whose last 32 bits are an IPv4 address (RFC 4291 IPv4-compatible, RFC 6052 NAT64
# well-known prefix, RFC 8215 local-use NAT64 prefix in its /96 layout, the one translators use).
_LOW_32_BITS = (
    ipaddress.IPv6Network("::/96"),
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
)


class BlockedAddressError(Exception):
    """The URL points somewhere outbound calls may not go."""


class ResponseTooLargeError(Exception):
    """The response body went over the byte cap (the connection was closed there)."""


def carried_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries: the mapped, compatible or NAT64 one, the 6to4
    gateway, or a Teredo address's server and client; none for any other IPv6 address."""
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if any(ip in net for net in _LOW_32_BITS):
        return (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:
        return ip.teredo
    return ()


def forbidden(ip: IP) -> bool:
    """True unless outbound calls may connect to ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        carried = carried_ipv4(ip)
        if carried:
            return any(forbidden(v4) for v4 in carried)
    return ip in METADATA or not ip.is_global or ip.is_multicast
