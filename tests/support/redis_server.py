"""A private redis-server on a free loopback port (``tests.support.ports``), for the tests and the bench.

The product's ``EmbeddedRedis`` (app/cli/embedded_redis.py, the demo's server) with what only
tests need: AOF persistence and ``restart()``, which keeps the port and data directory so
persistence can be exercised across a restart.
"""

from __future__ import annotations

import time

from app.cli.embedded_redis import EmbeddedRedis, EmbeddedRedisError, redis_server_binary
from tests.support.ports import free_port

__all__ = ["RedisServer", "RedisServerError", "free_port", "redis_server_binary"]

RedisServerError = EmbeddedRedisError


class RedisServer(EmbeddedRedis):
    def __init__(
        self, *, appendonly: bool = False, appendfsync: str = "everysec", port: int | None = None
    ) -> None:
        args = ("--appendonly", "yes" if appendonly else "no", "--appendfsync", appendfsync)
        super().__init__(port=port or free_port(), args=args)
        self.appendonly = appendonly
        self.appendfsync = appendfsync

    def restart(self, down_s: float = 0.0, *, kill: bool = True) -> None:
        self.stop(kill=kill)
        if down_s:
            time.sleep(down_s)
        self.start()
