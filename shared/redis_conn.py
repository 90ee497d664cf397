"""Redis clients from settings: REDIS_URL (password, db, TLS with rediss://) or Sentinel.

Commands retry with exponential backoff on connection errors and timeouts, so a Redis restart of
a few seconds stalls callers instead of crashing them. The API uses a short retry budget so it can
answer 503 quickly; workers use a long one so runs ride out an outage.
"""

from __future__ import annotations

from typing import TypeVar
from urllib.parse import urlparse

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.settings import Settings

__all__ = ["connect"]

R = TypeVar("R", bound=Redis)


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
    )
    if settings.redis_sentinels:
        hosts = []
        for item in settings.redis_sentinels.split(","):
            host, _, port = item.strip().rpartition(":")
            hosts.append((host, int(port)))
        url = urlparse(settings.redis_url)
        db = int((url.path or "/0").lstrip("/") or 0)
        sentinel = Sentinel(hosts, password=url.password, db=db, ssl=url.scheme == "rediss", **common)  # type: ignore[no-untyped-call]
        return sentinel.master_for(settings.redis_sentinel_master, redis_class=cls)  # type: ignore[no-any-return]
    pool = BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=30, **common
    )
    return cls(connection_pool=pool, retry=retry, retry_on_error=common["retry_on_error"])  # type: ignore[arg-type]
