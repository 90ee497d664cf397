"""The clients' pool (shared/redis_conn.py QuickPool) hands an idle connection over without a turn of
the event loop, and still never hands over one with something unread on it (a reply no one read,
a connection the server closed): redis-py's check, made on what the connection has received. On a
real redis-server."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import pytest
import redis as sync_redis

from shared.redis_conn import QuickPool, connect
from shared.settings import Settings
from shared.topology import Topology

pytestmark = pytest.mark.integration


async def _turns_during(aw: object) -> int:
    """The turns of the event loop that pass while ``aw`` is awaited."""
    loop = asyncio.get_running_loop()
    turns, on = 0, True

    def tick() -> None:
        nonlocal turns
        turns += 1
        if on:
            loop.call_soon(tick)

    loop.call_soon(tick)
    await asyncio.sleep(0)  # the ticker runs
    before = turns
    await aw  # type: ignore[misc]
    on = False
    return turns - before


async def test_an_idle_connection_is_handed_over_without_a_turn_of_the_loop(redis_url: str) -> None:
    client = connect(Settings(redis_url=redis_url), retries=1)
    node = Topology(Settings(redis_url=redis_url, redis_cluster=True), retries=1)._client(
        f"127.0.0.1:{urlparse(redis_url).port}"
    )
    for c in (client, node):
        pool = c.connection_pool
        assert isinstance(pool, QuickPool)
        assert await c.ping()  # a connection made, idle in the pool
        got = asyncio.ensure_future(pool.get_connection())
        assert await _turns_during(got) == 0  # redis-py's check of the socket took two
        conn = got.result()
        await pool.release(conn)
        assert await c.echo("again") == b"again"
        await c.aclose()


async def test_a_connection_with_a_reply_unread_is_not_handed_over_as_is(redis_url: str) -> None:
    client = connect(Settings(redis_url=redis_url), retries=1)
    pool = client.connection_pool
    conn = await pool.get_connection()
    await conn.send_command("ECHO", "stale")  # its reply never read
    await pool.release(conn)
    await asyncio.sleep(0.05)  # the reply has arrived
    for _ in range(3):
        assert await client.echo("fresh") == b"fresh"
    await client.aclose()


async def test_a_connection_the_server_closed_is_made_again(redis_url: str) -> None:
    client = connect(Settings(redis_url=redis_url), retries=1)
    assert await client.ping()
    probe = sync_redis.Redis.from_url(redis_url, lib_name=None, lib_version=None)
    probe.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    probe.close()
    await asyncio.sleep(0.05)  # the close has arrived
    assert await client.echo("after") == b"after"
    await client.aclose()
