"""Redis clients from settings: REDIS_URL (password, db, TLS with rediss://) or Sentinel.

Commands retry with exponential backoff on connection errors and timeouts, so a Redis restart of
a few seconds stalls callers instead of crashing them. The API uses a short retry budget so it can
answer 503 quickly; workers use a long one so runs ride out an outage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlparse

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.settings import Settings

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
    from redis._parsers.hiredis import NOT_ENOUGH_DATA
except ImportError:  # pragma: no cover - hiredis is a dependency (redis[hiredis])
    _hiredis_pack = None
    NOT_ENOUGH_DATA = object()

__all__ = ["QUIET", "FastPack", "JustConnected", "QuickPool", "connect", "fast_pack"]

R = TypeVar("R", bound=Redis)

# No CLIENT SETINFO on a new connection: redis-py sends two by default, a round trip each new
# connection pays, and a Redis before 7.2 answers both with an error.
QUIET: dict[str, Any] = {"lib_name": None, "lib_version": None}


class FastPack:
    """redis-py's ``pack_command`` with the same bytes on the wire, in linear time.

    redis-py re-joins the whole buffer for every argument (quadratic in a command's size) and
    encodes each argument through a chain of type checks; a worker's commit script has dozens
    of arguments and a claim a thousand job ids, and packing them was a tenth of a busy worker's
    CPU. hiredis's ``pack_command`` does it in C (3 µs for a 38-argument commit, 10 µs in the
    Python loop below, which remains for what hiredis refuses). Arguments redis-py cannot send
    still raise its ``DataError`` (from its encoder)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        assert not isinstance(args[0], float)
        if isinstance(args[0], str):
            args = tuple(args[0].encode().split()) + args[1:]
        elif b" " in args[0]:
            args = tuple(args[0].split()) + args[1:]
        enc = self.encoder  # type: ignore[attr-defined]
        if _hiredis_pack is not None and enc.encoding == "utf-8" and enc.encoding_errors == "strict":
            try:  # hiredis's packer, in C: the same bytes for str, bytes, int, float and buffers
                return [_hiredis_pack(args)]
            except TypeError:  # None, bool, subclasses (enums): redis-py's encoder decides below
                pass
        encode, charset, errors = enc.encode, enc.encoding, enc.encoding_errors
        cutoff: int = self._buffer_cutoff  # type: ignore[attr-defined]
        output: list[bytes] = []
        pieces = [b"*%d\r\n" % len(args)]
        for a in args:
            t = type(a)
            if t is bytes:
                arg = a
            elif t is str:
                arg = a.encode(charset, errors)
            elif t is int:
                arg = b"%d" % a
            else:  # floats, memoryviews, subclasses, and what redis-py refuses (DataError)
                arg = encode(a)
            n = len(arg)
            if n > cutoff or isinstance(arg, memoryview):  # large values go as their own chunk
                pieces.append(b"$%d\r\n" % n)
                output += (b"".join(pieces), arg)
                pieces = [b"\r\n"]
            else:
                pieces += (b"$%d\r\n" % n, arg, b"\r\n")
        output.append(b"".join(pieces))
        return output


class JustConnected:
    """No health-check PING before a new connection's first command. redis-py checks a connection
    whose last reply is older than ``health_check_interval``, and one that read no reply while
    connecting (no AUTH, no SELECT) counts as never checked: a round trip for a connection that
    has just been made."""

    async def on_connect(self) -> None:
        await super().on_connect()  # type: ignore[misc]
        interval: float = self.health_check_interval  # type: ignore[attr-defined]
        if interval:
            self.next_health_check = asyncio.get_running_loop().time() + interval


class QuickPool(BlockingConnectionPool):
    """redis-py's blocking pool, whose ``get_connection`` hands an idle connection over at once.

    redis-py checks every connection it hands out for data left unread (a reply nobody read, a
    server that closed it): with hiredis's parser, a read of the socket under a timeout of 0,
    which costs two turns of the event loop (the timeout fires in the next, the cancelled read
    resumes in the one after) and a cancellation, 40-90 µs a command on this machine, before any
    command of the worker (its commit among them) is written. Here the same check is made on what
    the connection has already received (its stream's buffer, its end, a reply parsed but not
    taken), with no turn of the loop: a connection idle in the pool has seen every turn since it
    went back. A connection that fails the check, a pool with callers waiting for a connection (they
    go first) or with none idle, and any other parser, go redis-py's way."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        idle = self._available_connections
        if args or kwargs or not idle or getattr(self._condition, "_waiters", None):
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-any-return]
        conn = idle.pop()
        self._in_use_connections.add(conn)
        quiet = _quiet(conn)
        if quiet:
            return conn
        try:
            if quiet is False:  # a reply no one read: redis-py would find it too, and reconnect
                await conn.disconnect()
            await self.ensure_connection(conn)  # redis-py's check, reconnecting if need be
        except BaseException:
            await self.release(conn)
            raise
        return conn


def _quiet(conn: Any) -> bool | None:
    """Whether the connection (with hiredis's parser) has received nothing that no one has read:
    redis-py's ``can_read_destructive`` on what has arrived so far. None: not known here (not
    connected, another parser, data on its stream): redis-py's own check decides."""
    stream, parser = conn._reader, conn._parser
    reader: Any = getattr(parser, "_reader", None)
    if stream is None or conn._writer is None or not getattr(parser, "_connected", False):
        return None
    if not hasattr(reader, "gets") or stream.at_eof() or getattr(stream, "_buffer", True):
        return None
    return reader.gets() is NOT_ENOUGH_DATA  # (a reply taken here: the connection is dropped)


_fast: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def fast_pack(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    """``cls`` (a redis-py connection class) with ``FastPack``'s packing, ``JustConnected``."""
    if issubclass(cls, FastPack):
        return cls
    if cls not in _fast:
        _fast[cls] = type(cls.__name__, (FastPack, JustConnected, cls), {})
    return _fast[cls]


def connect(
    settings: Settings,
    *,
    retries: int = 40,
    cls: type[R] = Redis,  # type: ignore[assignment]
    max_connections: int = 64,
    socket_timeout: float | None = None,
) -> R:
    """A client on a bounded, blocking pool: callers wait for a free connection instead of failing.
    ``socket_timeout`` bounds every call (a stalled Redis then fails the call instead of hanging it)."""
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries)
    common = dict(
        retry=retry,
        retry_on_error=[RedisConnectionError, RedisTimeoutError, ConnectionResetError, OSError],
        socket_timeout=socket_timeout,
        socket_connect_timeout=2.0,
        socket_keepalive=True,
        health_check_interval=15,
        **QUIET,
    )
    if settings.redis_sentinels:
        hosts = []
        for item in settings.redis_sentinels.split(","):
            host, _, port = item.strip().rpartition(":")
            hosts.append((host, int(port)))
        url = urlparse(settings.redis_url)
        db = int((url.path or "/0").lstrip("/") or 0)
        # What redis-py gives the sentinels by default (the socket options), quiet too.
        to_sentinels = {k: v for k, v in common.items() if k.startswith("socket_")} | QUIET
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            hosts,
            sentinel_kwargs=to_sentinels,
            password=url.password,
            db=db,
            ssl=url.scheme == "rediss",
            **common,
        )
        client: R = sentinel.master_for(settings.redis_sentinel_master, redis_class=cls)
    else:
        pool = QuickPool.from_url(settings.redis_url, max_connections=max_connections, timeout=30, **common)
        pool.connection_class = fast_pack(pool.connection_class)
        client = cls(connection_pool=pool, retry=retry, retry_on_error=common["retry_on_error"])
    # The client owns the pool built for it: its aclose() closes the pool's connections too (redis-py
    # leaves a pool it was given open, so each closed client left its sockets to the collector).
    client.auto_close_connection_pool = True
    return client
