"""Fixtures: a private redis-server per test session on a free port (never the machine's own)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from tests.support.redis_server import RedisServer

# A worker built in a test serves /metrics on an ephemeral port unless the test asks otherwise:
# a fixed port (the production default, 9100) collides between workers and with the machine.
os.environ["AGENTMILL_WORKER_METRICS_PORT"] = "0"
# The tests drive runs with the test-only `scripted` profile and tools (echo, sleep, fail, flaky);
# worker processes the tests start inherit this. Production leaves it unset.
os.environ["AGENTMILL_DEV_PROFILES"] = "true"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """A clean database on the private server for each test."""
    import redis as sync_redis

    c = sync_redis.Redis.from_url(redis_server.url)
    c.flushall()
    c.close()
    yield redis_server.url


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()
