"""An IPv6 address that carries an IPv4 one is judged as the IPv4 address it carries."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shared.netguard import check_url
from shared.netguard_rules import BlockedAddressError, carried_ipv4, forbidden

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address
PUBLIC = V4("8.8.8.8")
TEREDO_SERVER = V4("65.54.227.120")  # a public Teredo server


def _low32(prefix: str) -> Callable[[V4], V6]:
    return lambda v4: V6(int(V6(prefix)) | int(v4))


# Each way an IPv6 address carries an IPv4 one: how to build it from the IPv4 address.
EMBEDDINGS: dict[str, Callable[[V4], V6]] = {
    "mapped ::ffff:0:0/96": _low32("::ffff:0:0"),
    "compatible ::/96": _low32("::"),
    "nat64 64:ff9b::/96": _low32("64:ff9b::"),
    "6to4 2002::/16": lambda v4: V6((0x2002 << 112) | (int(v4) << 80) | 0x1),
    "teredo client 2001::/32": lambda v4: V6(
        (0x20010000 << 96) | (int(TEREDO_SERVER) << 64) | (int(v4) ^ 0xFFFFFFFF)
    ),
    "teredo server 2001::/32": lambda v4: V6(
        (0x20010000 << 96) | (int(v4) << 64) | (int(PUBLIC) ^ 0xFFFFFFFF)
    ),
    "translated ::ffff:0:0:0/96": _low32("::ffff:0:0:0"),
    "isatap ::0:5efe:0:0/96 under a global /64": _low32("2600:1f18:1:2:0:5efe::"),
    "isatap ::200:5efe:0:0/96 under a global /64": _low32("2600:1f18:1:2:200:5efe::"),
}


def _nat64_layout(*pieces: tuple[int, int]) -> Callable[[V4], V6]:
    """RFC 6052: the IPv4 address's bits placed at (first bit, count) pieces after 64:ff9b:1::/48."""

    def build(v4: V4) -> V6:
        value, left = int(V6("64:ff9b:1::")), 32
        for first, count in pieces:
            left -= count
            value |= ((int(v4) >> left) & ((1 << count) - 1)) << (128 - first - count)
        return V6(value)

    return build


# Forms whose IPv4 address may be read more than one way (RFC 8215's local-use NAT64 prefix in its
# /96, /48, /56 and /64 layouts): refused if any reading is, so a public address there may be too.
AMBIGUOUS: dict[str, Callable[[V4], V6]] = {
    "local nat64 64:ff9b:1::/48, /96 layout": _low32("64:ff9b:1:abcd::"),
    "local nat64 64:ff9b:1::/48, /48 layout": _nat64_layout((48, 16), (72, 16)),
    "local nat64 64:ff9b:1::/48, /56 layout": _nat64_layout((56, 8), (72, 24)),
    "local nat64 64:ff9b:1::/48, /64 layout": _nat64_layout((72, 32)),
}
EVERY_FORM = {**EMBEDDINGS, **AMBIGUOUS}
# Every IPv4 range outbound calls may not reach (RFC 6890's special-purpose ones and multicast).
BLOCKED_V4 = [ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
)]  # fmt: skip
PRIVATE_V4 = ["127.0.0.1", "10.0.0.5", "192.168.1.1", "169.254.169.254", "100.100.100.200", "0.0.0.0",
              "100.64.0.1", "172.16.0.1", "224.0.0.1", "255.255.255.255"]  # fmt: skip


@pytest.mark.parametrize("form", EVERY_FORM)
@pytest.mark.parametrize("v4", PRIVATE_V4)
def test_a_private_ipv4_is_refused_in_every_ipv6_form(form: str, v4: str) -> None:
    ip = EVERY_FORM[form](V4(v4))
    assert V4(v4) in carried_ipv4(ip)
    assert forbidden(ip), f"{ip} carries {v4}"


@pytest.mark.parametrize("form", EMBEDDINGS)
def test_a_public_ipv4_passes_in_every_ipv6_form(form: str) -> None:
    assert not forbidden(EMBEDDINGS[form](V4("1.1.1.1")))


@settings(max_examples=300, deadline=None)
@given(form=st.sampled_from(sorted(EMBEDDINGS)), v4=st.integers(0, 2**32 - 1).map(V4))
@example(form="nat64 64:ff9b::/96", v4=V4("127.0.0.1"))
@example(form="6to4 2002::/16", v4=V4("169.254.169.254"))
def test_the_verdict_on_an_embedded_ipv4_is_the_verdict_on_the_ipv4(form: str, v4: V4) -> None:
    assert forbidden(EMBEDDINGS[form](v4)) == forbidden(v4)


@settings(max_examples=500, deadline=None)
@given(
    form=st.sampled_from(sorted(EVERY_FORM)),
    v4=st.sampled_from(BLOCKED_V4).flatmap(
        lambda net: st.integers(int(net.network_address), int(net.broadcast_address)).map(V4)
    ),
)
@example(form="translated ::ffff:0:0:0/96", v4=V4("127.0.0.1"))
@example(form="translated ::ffff:0:0:0/96", v4=V4("169.254.169.254"))
@example(form="local nat64 64:ff9b:1::/48, /48 layout", v4=V4("10.1.2.3"))
def test_every_blocked_ipv4_is_refused_in_every_ipv6_form(form: str, v4: V4) -> None:
    assert forbidden(v4)
    assert forbidden(EVERY_FORM[form](v4)), f"{EVERY_FORM[form](v4)} carries {v4}"


@pytest.mark.parametrize("layout", ["/96", "/64"])
def test_a_public_ipv4_in_the_local_nat64_96_and_64_layouts_passes(layout: str) -> None:
    assert not forbidden(AMBIGUOUS[f"local nat64 64:ff9b:1::/48, {layout} layout"](V4("1.1.1.1")))


def test_an_isatap_address_under_a_private_prefix_stays_refused() -> None:
    assert forbidden(V6("fe80::5efe:808:808")) and forbidden(V6("fd00::200:5efe:808:808"))


@pytest.mark.parametrize("ip", ["2606:4700:4700::1111", "2a00:1450:4001:80b::200e"])
def test_plain_public_ipv6_is_not_decoded(ip: str) -> None:
    assert carried_ipv4(V6(ip)) == () and not forbidden(V6(ip))


@pytest.mark.parametrize(
    "host",
    [
        "[64:ff9b::a9fe:a9fe]",
        "[2002:7f00:1::1]",
        "[::127.0.0.1]",
        "[::ffff:0:127.0.0.1]",
        "[::ffff:0:a9fe:a9fe]",
    ],
)
async def test_a_url_naming_an_embedded_private_ipv4_is_refused(host: str) -> None:
    with pytest.raises(BlockedAddressError, match="not a public address"):
        await check_url(f"http://{host}/latest/meta-data")
