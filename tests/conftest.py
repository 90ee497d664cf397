"""Fixtures: a private redis-server per test session on a free port (never the machine's own)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.support import forkserver, loop_watchdog
from tests.support.redis_server import RedisServer

# --dist loadgroup's groups, where pytest 9 reads them (tests/support/xdist_groups.py)
pytest_plugins = ("tests.support.xdist_groups",)

# A worker built in a test serves /metrics on an ephemeral port unless the test asks otherwise:
# a fixed port (the production default, 9100) collides between workers and with the machine.
os.environ["AGENTMILL_WORKER_METRICS_PORT"] = "0"
# The tests drive runs with the test-only `scripted` profile and tools (echo, sleep, fail, flaky);
# worker processes the tests start inherit this. Production leaves it unset.
os.environ["AGENTMILL_DEV_PROFILES"] = "true"
# Every event loop of this process is watched: a loop that does not turn for a second is a stall,
# reported with its stacks in its test's report (tests/support/loop_watchdog.py).
WATCHDOG = loop_watchdog.install(os.environ.get("PYTEST_XDIST_WORKER", "main"))


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
    """A clean database on the private server for each test, its slow log as Redis starts it (a test
    that logs every command leaves neither its entries nor the setting to the next)."""
    import redis as sync_redis

    c = sync_redis.Redis.from_url(redis_server.url)
    c.flushall()
    c.config_set("slowlog-log-slower-than", 10_000)
    c.config_set("slowlog-max-len", 128)
    c.slowlog_reset()
    c.close()
    yield redis_server.url


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


PEER_TESTS = Path(__file__).parent / "peer"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The peer suites' modules (tests/peer/test_*.py) import their peers' SDKs: anthropic alone is
    ~2.5 s of CPU, paid by every pytest process that collects them. Where the marker expression
    leaves the peer tests out (the default: ``not slow and not peer``), they are not imported."""
    if (
        collection_path.parent == PEER_TESTS
        and collection_path.name.startswith("test_")
        and "not peer" in (config.option.markexpr or "")
    ):
        return True
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    """The fork server for this process's worker, API and CLI starts (tests/support/forkserver.py);
    not in xdist's controller, which runs no test."""
    if getattr(session.config.option, "numprocesses", None) and not hasattr(session.config, "workerinput"):
        return
    forkserver.prestart()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """The stalls of the test's loops in this phase, as a section of its report."""
    report = yield
    if WATCHDOG is not None:
        if stalls := WATCHDOG.take():
            report.sections.append(("loop stalls", "\n\n".join(s.text() for s in stalls)))
        WATCHDOG.where = f"{item.nodeid} (after {call.when})"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if WATCHDOG is not None:
        WATCHDOG.where = f"{item.nodeid} (setup)"
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if WATCHDOG is not None:
        WATCHDOG.where = f"{item.nodeid} (call)"
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    if WATCHDOG is not None:
        WATCHDOG.where = f"{item.nodeid} (teardown)"
    return (yield)


STALLS: list[tuple[float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collected where the summary is printed (xdist's controller or the only process)."""
    for title, text in report.sections:
        if title == "loop stalls":
            STALLS.extend(
                (float(line.split()[2]), line)
                for line in text.splitlines()
                if line.startswith("loop stalled")
            )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if STALLS:
        terminalreporter.section("event-loop stalls (tests/support/loop_watchdog.py)")
        terminalreporter.write_line(
            f"{len(STALLS)} stalls over {loop_watchdog.threshold_s()} s; the longest:"
        )
        for _, line in sorted(STALLS, reverse=True)[:10]:
            terminalreporter.write_line(line)
