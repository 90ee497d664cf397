"""What a new connection to Redis sends before its first command: no CLIENT SETINFO (from
``connect``'s clients, a Topology's node clients or its slot-map probe; redis-py sends two by
default, a Redis before 7.2 refuses both with an error and a later one runs them), and no
health-check PING. Counted by the server's own statistics (INFO commandstats and errorstats) on a
real redis-server."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest
import redis as sync_redis
from redis.exceptions import ResponseError

from shared.redis_conn import connect
from shared.settings import Settings
from shared.topology import Topology

pytestmark = pytest.mark.integration


def stats(probe: sync_redis.Redis) -> dict[str, Any]:
    return {**probe.info("commandstats"), **probe.info("errorstats")}


async def test_a_new_connection_sends_no_client_setinfo(redis_url: str) -> None:
    port = urlparse(redis_url).port
    probe = sync_redis.Redis.from_url(redis_url, lib_name=None, lib_version=None)
    probe.config_resetstat()
    client = connect(Settings(redis_url=redis_url), retries=1)
    assert await client.ping()
    await client.aclose()
    topo = Topology(Settings(redis_url=redis_url, redis_cluster=True), retries=1)
    node = topo._client(f"127.0.0.1:{port}")  # a cluster node's client, here on a plain server
    assert await node.ping()
    with pytest.raises(ResponseError):  # no cluster here, but the probe connected first
        await topo._ask(f"127.0.0.1:{port}")
    await topo.aclose()
    seen = stats(probe)
    probe.close()
    assert "cmdstat_client|setinfo" not in seen, seen  # a Redis that knows it (7.2 and later)
    assert {k: v for k, v in seen.items() if k.startswith("errorstat_")} == {  # one that does not
        "errorstat_ERR": {"count": 1}  # CLUSTER SHARDS on a plain server, and nothing else
    }, seen


async def test_a_new_connections_first_command_goes_without_a_health_check(redis_url: str) -> None:
    """The clients check a connection idle for 15 s with a PING; one just made is not checked."""
    probe = sync_redis.Redis.from_url(redis_url, lib_name=None, lib_version=None)
    probe.config_resetstat()
    client = connect(Settings(redis_url=redis_url), retries=1)
    node = Topology(Settings(redis_url=redis_url, redis_cluster=True), retries=1)._client(
        f"127.0.0.1:{urlparse(redis_url).port}"
    )
    for c in (client, node):
        assert await c.echo("hello") == b"hello"
        await c.aclose()
    seen = stats(probe)
    probe.close()
    assert seen["cmdstat_echo"]["calls"] == 2 and "cmdstat_ping" not in seen, seen
