"""Which Redis client serves a hash slot: one client for a single Redis (or Sentinel), one plain
client per master node on a Redis Cluster.

Why plain clients per node rather than redis-py's ``RedisCluster``: arq queues jobs with
MULTI/EXEC and our Lua scripts run by EVALSHA over many keys, and ``RedisCluster`` supports
neither transactions nor multi-key scripts as one call. Every call we make is single-slot (all
keys of a run or partition carry one hash tag), so a plain connection to the master that owns the
slot does everything a single Redis does. What this module adds is the slot map (``CLUSTER
SHARDS`` as shared/slot_map.py reads it, refreshed on redirections and errors) and ``call``, which
rebinds to the slot's new master after a failover instead of retrying a dead one.

Node clients parse cluster errors into redis-py's classes (``MovedError``, ``TryAgainError``, …);
a plain client's parser would raise them as bare ``ResponseError``s.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar
from urllib.parse import urlparse, urlunparse

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterParser
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    ClusterDownError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError as MovedError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared import slot_map
from shared.keys import SLOTS
from shared.redis_conn import QUIET, QuickPool, connect, fast_pack
from shared.settings import Settings
from shared.slot_map import Shard

__all__ = ["Topology", "is_retryable"]

R = TypeVar("R", bound=Redis)
T = TypeVar("T")

REFRESH_MIN_INTERVAL_S = 0.2
NODE_RETRIES = 3  # per call on one node (0.04 + 0.08 + 0.1 s apart); then ``call`` refreshes the map
_RETRYABLE = (
    AskError,  # and MovedError, its subclass
    TryAgainError,
    ClusterDownError,  # and MasterDownError
    ReadOnlyError,
    RedisConnectionError,
    RedisTimeoutError,
    TimeoutError,
    OSError,
)
# UNBLOCKED: a blocking read (XREAD BLOCK) on a master that was just demoted. The codes of those
# errors, for a ResponseError parsed without the cluster parser (a pipeline
# prefixes the args' repr: "Command # 1 (SET k 1) of pipeline caused error: ('MOVED 7 h:p',)").
_CODES = ("MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "UNBLOCKED")


def is_retryable(e: BaseException) -> bool:
    """An error after which the slot's owner may have changed or come back: worth a refresh and a retry."""
    if isinstance(e, AuthenticationError | AuthorizationError):
        return False
    if isinstance(e, _RETRYABLE):
        return True
    if isinstance(e, ResponseError) and e.args:
        msg = str(e.args[0]).rpartition("caused error: ")[2].lstrip("('\"")
        return msg.startswith(_CODES)
    return False


class _OneConnect(AbstractConnection):
    """A connection that connects once per attempt: redis-py 5.3 retries the connect inside
    every retry of a command, so a dead node costs (retries + 1)² connects; here retries + 1."""

    async def connect(self) -> None:
        retry, self.retry = self.retry, Retry(NoBackoff(), 0)
        try:
            await super().connect()  # type: ignore[no-untyped-call]
        finally:
            self.retry = retry


_one: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _one_connect(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    if cls not in _one:
        _one[cls] = type(cls.__name__, (_OneConnect, cls), {})
    return _one[cls]


class Topology(Generic[R]):
    """The client of the master owning each hash slot (one client for a single Redis)."""

    def __init__(
        self,
        settings: Settings,
        *,
        client_cls: type[R] = Redis,  # type: ignore[assignment]  # arq's ArqRedis for the queue
        retries: int = 40,
        max_connections: int = 64,
        socket_timeout: float | None = None,
    ) -> None:
        self.settings = settings
        self.is_cluster: bool = settings.redis_cluster
        self._cls = client_cls
        self._retries = retries
        self._max_connections = max_connections
        self._socket_timeout = socket_timeout
        self._seed = urlparse(settings.redis_url)
        self._single: R | None = None
        if not self.is_cluster:
            self._single = connect(
                settings,
                retries=retries,
                cls=client_cls,
                max_connections=max_connections,
                socket_timeout=socket_timeout,
            )
        self._by_slot: list[R | None] = [None] * SLOTS
        self._addr_by_slot: list[str | None] = [None] * SLOTS
        self._masters: list[str] = []  # "host:port" of the current masters, in slot order
        self._known: list[str] = []  # every node of the last map, masters and replicas
        self._clients: dict[str, R] = {}  # every node client ever made, closed by aclose()
        self._refreshing: asyncio.Future[bool] | None = None
        self._last_refresh = float("-inf")
        self.refreshes = 0  # slot map reads (tests and metrics)

    async def start(self) -> None:
        """Read the slot map, retrying as ``connect``'s clients would (``retries`` times, capped
        backoff) while no node answers. A no-op for a single Redis."""
        if not self.is_cluster:
            return
        backoff = ExponentialBackoff(cap=1.0, base=0.05)
        for attempt in range(self._retries + 1):
            try:
                await self.refresh()
                return
            except (RedisConnectionError, RedisTimeoutError, OSError):
                if attempt == self._retries:
                    raise
                await asyncio.sleep(backoff.compute(attempt + 1))

    def for_slot(self, slot: int) -> R:
        """The client of the node that owns ``slot`` now (by the last map read)."""
        if self._single is not None:
            return self._single
        client = self._by_slot[slot]
        if client is None:  # not covered in the last map: any master, which will redirect or refuse
            if not self._masters:
                raise RuntimeError("Topology.start() has not read the cluster's slot map")
            client = self._clients[self._masters[0]]
        return client

    def clients(self) -> list[R]:
        """One client per current master (the single client for a single Redis)."""
        if self._single is not None:
            return [self._single]
        return [self._clients[a] for a in self._masters]

    def address(self, slot: int) -> str | None:
        """``host:port`` of the slot's master by the last map read (None for a single Redis)."""
        return self._addr_by_slot[slot]

    async def refresh(self) -> bool:
        """Read the slot map again from the first node that answers (the seed, then every known
        node); True if it changed. Concurrent callers share one read; reads are at least 200 ms apart.
        Raises ConnectionError when no node answers."""
        if not self.is_cluster:
            return False
        return await asyncio.shield(self._refresh_task())

    async def call(self, slot: int, fn: Callable[[R], Awaitable[T]], *, deadline_s: float = 30.0) -> T:
        """``fn`` with the client of ``slot``'s master. On a cluster, after a redirection, a cluster
        or connection error, or a timeout: refresh the map and call again (short backoff) until
        ``deadline_s`` has passed, then raise the last error. A single Redis: just ``fn(client)``."""
        if self._single is not None:
            return await fn(self._single)
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        failures = 0
        while True:
            try:
                return await fn(self.for_slot(slot))
            except Exception as e:
                if not is_retryable(e) or loop.time() >= end:
                    raise
                failures += 1
                if isinstance(e, MovedError) and self._moved(e) and failures <= 2:
                    self._refresh_task()  # in the background: the MOVED named the new owner, go there now
                    continue
            # A backoff pause spent reading the map (reads are 200 ms apart), so a promoted replica
            # is used as soon as the map names it.
            until = min(end, loop.time() + min(1.0, 0.02 * 2**failures) * random.uniform(0.5, 1.0))
            while True:
                try:
                    if await self.refresh():
                        break
                except Exception as e:
                    if not is_retryable(e):
                        raise
                if loop.time() >= until:
                    break

    async def aclose(self) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
        if self._single is not None:
            await self._single.aclose(close_connection_pool=True)
        for client in self._clients.values():
            await client.aclose(close_connection_pool=True)
        self._clients.clear()
        self._masters, self._by_slot = [], [None] * SLOTS

    # internals

    def _refresh_task(self) -> asyncio.Future[bool]:
        """The map read under way, or a new one."""
        if self._refreshing is None:
            task = asyncio.ensure_future(self._refresh())
            task.add_done_callback(lambda t: None if t.cancelled() else t.exception())
            self._refreshing = task
        return self._refreshing

    async def _refresh(self) -> bool:
        try:
            wait = self._last_refresh + REFRESH_MIN_INTERVAL_S - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
            return await self._read_map()
        finally:
            self._last_refresh = asyncio.get_running_loop().time()
            self._refreshing = None

    async def _read_map(self) -> bool:
        seed = f"{self._seed.hostname}:{self._seed.port or 6379}"
        errors = []
        for addr in dict.fromkeys([seed, *self._known]):
            try:
                shards = await self._ask(addr)
            except (RedisConnectionError, RedisTimeoutError, OSError) as e:
                errors.append(f"{addr}: {e}")  # a ResponseError (no cluster there) is raised
                continue
            self.refreshes += 1
            return self._apply(shards, addr)
        raise RedisConnectionError(
            f"no node of the Redis Cluster answered CLUSTER SHARDS: {'; '.join(errors)}"
        )

    async def _ask(self, addr: str) -> list[Shard]:
        """Node ``addr``'s slot map: (slot ranges, master address, every node address) per shard."""
        host = addr.rpartition(":")[0]
        client: Redis = Redis.from_url(
            self._node_url(addr),
            decode_responses=True,
            socket_timeout=2.0,
            socket_connect_timeout=1.0,
            **QUIET,
        )
        try:
            try:
                raw = await client.execute_command("CLUSTER SHARDS")  # type: ignore[no-untyped-call]
            except ResponseError as e:
                if "unknown" not in str(e).lower():
                    raise
                slots = await client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
                return slot_map.from_slots(slots, host)
        finally:
            await client.aclose()
        return slot_map.from_shards(raw, host, tls=self._seed.scheme == "rediss")

    def _apply(self, shards: list[Shard], source: str) -> bool:
        by_addr: list[str | None] = [None] * SLOTS
        known: list[str] = []
        for ranges, master, everyone in shards:
            for start, end in ranges:
                by_addr[start : end + 1] = [master] * (end - start + 1)
            known += everyone
        self._known = list(dict.fromkeys([*known, source]))
        changed = by_addr != self._addr_by_slot
        if changed:
            masters = list(dict.fromkeys(a for a in by_addr if a is not None))
            clients = {a: self._client(a) for a in masters}
            self._by_slot = [None if a is None else clients[a] for a in by_addr]
            self._addr_by_slot, self._masters = by_addr, masters
        return changed

    def _moved(self, e: MovedError) -> bool:
        """Rebind the one slot a MOVED names at once (the next map read confirms it); True if it moved."""
        addr = f"{e.host}:{e.port}"
        if not 0 <= e.slot_id < SLOTS or self._addr_by_slot[e.slot_id] == addr:
            return False
        self._addr_by_slot[e.slot_id] = addr
        self._by_slot[e.slot_id] = self._client(addr)
        return True

    def _node_url(self, addr: str) -> str:
        """The seed URL (scheme, user, password, query) with ``addr`` as its host and port."""
        host, _, port = addr.rpartition(":")
        userinfo = self._seed.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        netloc += f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return urlunparse(self._seed._replace(netloc=netloc, path="/0"))

    def _client(self, addr: str) -> R:
        """The node's client (made once): ``connect``'s options, a few retries, the cluster parser."""
        if addr not in self._clients:
            retry = Retry(ExponentialBackoff(cap=0.1, base=0.02), NODE_RETRIES)
            retry_on = [RedisConnectionError, RedisTimeoutError, ConnectionResetError, OSError]
            pool = QuickPool.from_url(
                self._node_url(addr),
                max_connections=self._max_connections,
                timeout=30,
                parser_class=ClusterParser,
                retry=retry,
                retry_on_error=retry_on,
                socket_timeout=self._socket_timeout,
                socket_connect_timeout=2.0,
                socket_keepalive=True,
                health_check_interval=15,
                **QUIET,
            )
            pool.connection_class = _one_connect(fast_pack(pool.connection_class))
            self._clients[addr] = self._cls(connection_pool=pool, retry=retry, retry_on_error=retry_on)
        return self._clients[addr]
