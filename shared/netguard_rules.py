"""Which addresses outbound calls may reach: globally routable ones, never a cloud metadata address,
and an IPv6 address that carries an IPv4 one (mapped, translated, IPv4-compatible, NAT64, 6to4,
Teredo, ISATAP) only if the IPv4 address it carries may be reached. Pure: no I/O.

Python's ``is_global`` judges such an IPv6 address by its own prefix (``64:ff9b::7f00:1`` is global
to it, though a NAT64 gateway turns it into 127.0.0.1), so the carried address is decoded and
judged instead.
"""

from __future__ import annotations

import ipaddress
import re
import socket

__all__ = [
    "IP",
    "METADATA",
    "BlockedAddressError",
    "ResponseTooLargeError",
    "carried_ipv4",
    "forbidden",
    "host_refusal",
]

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "192.0.0.192")
)

# IPv4 ranges never reached, whatever this Python's ``is_global`` says of them (its table changed
# between versions: 3.11 calls 192.0.0.8 global): IANA's special-purpose ranges that are not
# globally reachable, the retired 6to4 relay anycast range, multicast and the limited broadcast.
_NOT_GLOBAL_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    )
)  # fmt: skip

# IPv6 prefixes whose last 32 bits are an IPv4 address: RFC 4291 IPv4-compatible, RFC 2765
# IPv4-translated (``::ffff:0:a.b.c.d``), RFC 6052 NAT64 well-known prefix, and RFC 8215's
# local-use NAT64 prefix in its /96 layout (its other layouts: _LOCAL_NAT64_LAYOUTS).
_LOW_32_BITS = (
    ipaddress.IPv6Network("::/96"),
    ipaddress.IPv6Network("::ffff:0:0:0/96"),
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
)
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
# RFC 6052's layouts for a NAT64 prefix of 48, 56 or 64 bits: where the IPv4 address's bits sit
# (as (first bit from the left, bit count) pieces), bits 64-71 and the suffix being zero.
_LOCAL_NAT64_LAYOUTS = (
    ((48, 16), (72, 16)),
    ((56, 8), (72, 24)),
    ((72, 32),),
)
_ISATAP_ID = 0x00005EFE  # RFC 5214: the interface id 0000:5efe:a.b.c.d (u/g bits aside)


class BlockedAddressError(Exception):
    """The URL points somewhere outbound calls may not go."""


class ResponseTooLargeError(Exception):
    """The response body went over the byte cap (the connection was closed there)."""


def _bits(value: int, first: int, count: int) -> int:
    """``count`` bits of a 128-bit value, starting ``first`` bits from the left."""
    return (value >> (128 - first - count)) & ((1 << count) - 1)


def _local_nat64_layouts(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a local-use NAT64 address carries in RFC 6052's /48, /56 and /64 layouts
    (each whose reserved bits 64-71 and suffix are zero: the translator may use any of them)."""
    found = []
    value = int(ip)
    for pieces in _LOCAL_NAT64_LAYOUTS:
        v4, used = 0, 0
        for first, count in pieces:
            v4 = (v4 << count) | _bits(value, first, count)
            used |= ((1 << count) - 1) << (128 - first - count)
        start = pieces[0][0]
        rest = ((1 << (128 - start)) - 1) & ~used  # the bits after the prefix that carry nothing
        if value & rest == 0:
            found.append(ipaddress.IPv4Address(v4))
    return found


def carried_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries: the mapped, translated, compatible or NAT64 one
    (a local-use NAT64 address: in each layout it may use), the 6to4 gateway, a Teredo address's
    server and client, or an ISATAP address's; none for any other IPv6 address."""
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if any(ip in net for net in _LOW_32_BITS):
        low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        extra = _local_nat64_layouts(ip) if ip in _LOCAL_NAT64 else []
        return tuple(dict.fromkeys([low, *extra]))
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:
        return ip.teredo
    if _isatap(ip):
        return (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)
    return ()


def _isatap(ip: ipaddress.IPv6Address) -> bool:
    """An ISATAP address (any prefix; its interface id 0000:5efe or 0200:5efe, then IPv4), unless
    a form above claims it first."""
    claimed = ip.ipv4_mapped or ip.sixtofour or ip.teredo or any(ip in net for net in _LOW_32_BITS)
    return not claimed and _bits(int(ip), 64, 32) & ~0x03000000 == _ISATAP_ID


def forbidden(ip: IP) -> bool:
    """True unless outbound calls may connect to ``ip``. An IPv6 address carrying an IPv4 one is
    judged by what it carries (an ISATAP address, whose prefix is routed as IPv6, by both)."""
    if isinstance(ip, ipaddress.IPv6Address):
        carried = carried_ipv4(ip)
        if any(forbidden(v4) for v4 in carried):
            return True
        if carried and not _isatap(ip):
            return False
    if isinstance(ip, ipaddress.IPv4Address) and any(ip in net for net in _NOT_GLOBAL_V4):
        return True
    return ip in METADATA or not ip.is_global or ip.is_multicast


# Names that never resolve to a public address (RFC 6761, 6762, 8375; cloud metadata names end in
# .internal), and what a legacy IPv4 literal may look like (``127.1``, ``0x7f000001``, ``2130706433``).
_LOCAL_NAMES = ("localhost", ".localhost", ".local", ".internal", ".home.arpa", ".localdomain")
_LEGACY_V4 = re.compile(r"^[0-9a-fx.]+\Z")


def host_refusal(host: str) -> str | None:
    """Why a URL's host, as given, names somewhere outbound calls may not go, judged without
    resolving it: an IP literal (legacy IPv4 forms too, as a resolver reads them) by ``forbidden``,
    a name when it is local by definition; None when nothing in the name itself refuses it."""
    name = host.strip().strip("[]").rstrip(".").lower()
    ip: IP | None
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        ip = ipaddress.IPv4Address(socket.inet_aton(name)) if _legacy_v4(name) else None
    if ip is not None:
        return f"{ip} is not a public address" if forbidden(ip) else None
    if ":" in name or "%" in name:
        return "not a usable host"
    if "." not in name or name == "localhost" or name.endswith(_LOCAL_NAMES):
        return f"{name!r} is a local name"
    return None


def _legacy_v4(name: str) -> bool:
    if not _LEGACY_V4.match(name):
        return False
    try:
        socket.inet_aton(name)
    except OSError:
        return False
    return True
