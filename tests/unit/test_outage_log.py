"""A Redis outage in the log: one line as it begins, one with its length as it ends, nothing in
between; the watch that tells it, against a port nothing listens on; the worker's /readyz."""

from __future__ import annotations

import logging

import orjson
import pytest
from prometheus_client import CollectorRegistry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from shared.outage_log import OutageLog, shown_url
from shared.redis_watch import RedisWatch
from shared.settings import Settings
from worker.process.health import HealthServer

LOG = logging.getLogger("agentmill.test_outage")


def test_an_outage_is_logged_once_as_it_begins_and_once_as_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    outage = OutageLog(LOG, "redis://:secret@db:6379/0", clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger=LOG.name)
    outage.reachable()  # no outage: nothing to say
    for i in range(50):
        now[0] += 0.7
        outage.unreachable(f"ConnectionError: refused ({i})")
    assert outage.active and outage.reason == "ConnectionError: refused (49)"
    now[0] += 0.4
    outage.reachable()
    outage.reachable()
    assert [r.getMessage() for r in caplog.records] == [
        "redis unreachable at redis://:***@db:6379/0: ConnectionError: refused (0)",
        "redis reachable again after 34.7 s",  # 49 × 0.7 + 0.4 after the first failure
    ]
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
    assert not outage.active and outage.reason == ""


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://db:6379/0", "redis://db:6379/0"),
        ("redis://:pw@db:6379", "redis://:***@db:6379"),
        ("rediss://user:pw@db:6379", "rediss://user:***@db:6379"),
        ("redis://user@db", "redis://user@db"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert shown_url(url) == shown


async def test_the_watch_finds_a_redis_that_does_not_answer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    watch = RedisWatch(Settings(redis_url="redis://127.0.0.1:1/0"), OutageLog(LOG, "redis://127.0.0.1:1/0"))
    try:
        assert watch.up and not watch.in_outage()
        assert not await watch.check() and not await watch.check()
        assert not watch.up and watch.in_outage()
        assert "ConnectionError" in watch.outage.reason
        assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
    finally:
        await watch.aclose()


def test_the_workers_readyz_is_503_while_redis_is_unreachable_and_healthz_stays_200() -> None:
    up = [True]
    health = HealthServer(CollectorRegistry(), lambda: b"", redis_up=lambda: up[0])
    assert health.readiness()[0] == 200 and health.health()[0] == 200
    up[0] = False
    status, body = health.readiness()
    assert (status, orjson.loads(body)) == (503, {"status": "redis_unreachable"})
    assert health.health()[0] == 200  # the liveness probe: a worker waiting out an outage lives on
    health.ready = False
    assert health.readiness()[0] == 503 and orjson.loads(health.readiness()[1])["status"] == "starting"


def test_a_loops_failed_call_begins_an_outage_only_if_it_is_a_connection_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    watch = RedisWatch(Settings(), OutageLog(LOG, "redis://127.0.0.1:6379/0"))
    assert not watch.in_outage(ResponseError("ERR a script's error")) and watch.up
    assert watch.in_outage(RedisConnectionError("Connection refused")) and not watch.up
    assert watch.in_outage(ConnectionRefusedError(111, "refused"))  # the same outage: no new line
    assert [r.getMessage() for r in caplog.records] == [
        "redis unreachable at redis://127.0.0.1:6379/0: ConnectionError: Connection refused"
    ]
