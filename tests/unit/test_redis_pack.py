"""FastPack (shared/redis_conn.py) puts on the wire exactly the bytes redis-py's packer does."""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any

import pytest
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError

from shared.redis_conn import FastPack, connect, fast_pack
from shared.settings import Settings


class Kind(StrEnum):
    A = "a-kind"


class Num(IntEnum):
    ONE = 1


CASES: list[tuple[Any, ...]] = [
    ("PING",),
    ("CONFIG GET", "maxmemory"),  # a command name of two words
    (b"SCRIPT LOAD", "return 1"),
    ("EVALSHA", "a" * 40, 3, "k1", "k2", "k3", 5, -12, 0, 1.5, 2**70, "", b"", "é ü 中"),
    ("XADD", Kind.A, Num.ONE, 7),  # subclasses of str and int go through redis-py's encoder
    ("SET", "k", b"x" * 7000),  # beyond the buffer cutoff: a chunk of its own
    ("HSET", "h", "f", "y" * 10_000, "g", memoryview(b"zz"), "tail"),
    ("EVALSHA", "s", 1, "q", *range(1000), *(b"job:%d" % i for i in range(1000))),
]


def wire(chunks: list[Any]) -> bytes:
    return b"".join(bytes(c) for c in chunks)


@pytest.mark.parametrize("args", CASES)
def test_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    ours, theirs = fast_pack(Connection)(), Connection()
    assert wire(ours.pack_command(*args)) == wire(theirs.pack_command(*args))
    assert wire(ours.pack_commands([args, ("PING",)])) == wire(theirs.pack_commands([args, ("PING",)]))


@pytest.mark.parametrize("bad", [True, None, object(), [1]])
def test_unsendable_arguments_raise_redis_py_error(bad: Any) -> None:
    with pytest.raises(DataError):
        fast_pack(Connection)().pack_command("SET", "k", bad)


def test_connect_uses_it_for_the_url_scheme() -> None:
    r = connect(Settings(redis_url="redis://127.0.0.1:1/0"))
    assert issubclass(r.connection_pool.connection_class, FastPack)
    assert issubclass(r.connection_pool.connection_class, Connection)
    u = connect(Settings(redis_url="unix:///tmp/agentmill-none.sock"))
    assert issubclass(u.connection_pool.connection_class, UnixDomainSocketConnection)
    assert issubclass(u.connection_pool.connection_class, FastPack)
    assert fast_pack(fast_pack(Connection)) is fast_pack(Connection)


def test_plain_arguments_are_packed_by_hiredis_in_one_chunk() -> None:
    import hiredis

    args = ("EVALSHA", "a" * 40, 2, "k1", "k2", 5, 1.5, b"x" * 7000, "é")
    assert fast_pack(Connection)().pack_command(*args) == [hiredis.pack_command(args)]
    # An IntEnum member goes through redis-py's encoder instead (hiredis refuses int subclasses).
    assert len(fast_pack(Connection)().pack_command("XADD", Num.ONE, b"y" * 7000)) > 1
