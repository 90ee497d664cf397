"""The worker's lease deadline and the guard that keeps a late worker from sending anything."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import httpcore
import httpx
import pytest

from shared.settings import Settings
from worker.adapters.lease import LeaseBackend, LeaseExpiredError, WorkerLease, lease_guarded_client
from worker.process.jobs import lease_margin_ms


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_deadline_is_the_last_acknowledged_send_plus_the_lease_minus_the_margin() -> None:
    clock = FakeClock()
    lease = WorkerLease(lease_ms=2_000, margin_ms=300, clock=clock)
    assert lease.expired()  # no beat acknowledged yet: no lease
    with pytest.raises(LeaseExpiredError):
        lease.check("a tool call")
    lease.renewed(sent_at=100.0)
    clock.t = 101.69
    assert not lease.expired() and lease.remaining() == pytest.approx(0.01)
    lease.check("a tool call")
    # An acknowledgement of an older beat never moves the deadline back.
    lease.renewed(sent_at=101.5)
    lease.renewed(sent_at=100.5)
    assert lease.deadline == pytest.approx(101.5 + 1.7)
    clock.t = 103.2
    assert lease.expired()
    with pytest.raises(LeaseExpiredError, match="not starting a tool call"):
        lease.check("a tool call")
    lease.lapse()
    assert lease.expired()


def test_a_beat_acknowledged_after_the_deadline_does_not_revive_the_lease() -> None:
    """A beat sent before the deadline and answered after it (a failover, a slow master): runs may
    have stopped on the passed deadline without writing or being handed back. Revived, the worker
    kept its lease id, so those runs stayed 'running' under a live lease and were never redispatched
    (the cluster chaos run lost 7 so). The heartbeat must find the lease expired and take a new id."""
    clock = FakeClock()
    lease = WorkerLease(lease_ms=2_000, margin_ms=300, clock=clock)
    lease.renewed(sent_at=100.0)  # deadline 101.7
    clock.t = 101.8  # a run checked the lease now and stopped
    lease.renewed(sent_at=101.6)  # the beat sent just before the deadline, acknowledged after it
    assert lease.expired()
    lease.lapse()  # what the heartbeat does then: a new lease id, registered afresh
    lease.renewed(sent_at=101.9)
    assert not lease.expired() and lease.deadline == pytest.approx(101.9 + 1.7)


def test_margin_is_a_beat_at_least_a_tenth_of_the_lease_and_never_the_whole_lease() -> None:
    assert lease_margin_ms(Settings(lease_ms=30_000, heartbeat_ms=500)) == 3_000
    assert lease_margin_ms(Settings(lease_ms=2_000, heartbeat_ms=300)) == 300
    # settings refuse a beat over a third of the lease; the margin is capped even so
    assert lease_margin_ms(Settings.model_construct(lease_ms=1_000, heartbeat_ms=900)) == 500
    with pytest.raises(ValueError):
        WorkerLease(lease_ms=1_000, margin_ms=1_000)


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, log: list[bytes]) -> None:
        self.log = log

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.log.append(buffer)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    async def aclose(self) -> None:
        return None


class _SlowConnect(httpcore.AsyncNetworkBackend):
    """Connecting takes a while (an accept queue that is full); meanwhile the clock moves on."""

    def __init__(self, clock: FakeClock, connect_takes_s: float) -> None:
        self.clock = clock
        self.connect_takes_s = connect_takes_s
        self.sent: list[bytes] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        await asyncio.sleep(0)
        self.clock.t += self.connect_takes_s  # the worker was paused while its connect pended
        return _Stream(self.sent)


async def request_through(lease: WorkerLease, backend: _SlowConnect) -> None:
    async with httpcore.AsyncConnectionPool(network_backend=LeaseBackend(lease, backend)) as pool:
        await pool.request("POST", "http://127.0.0.1:9/exec", content=b"{}")


async def test_a_pause_during_connect_is_caught_before_the_request_is_written() -> None:
    clock = FakeClock()
    lease = WorkerLease(lease_ms=2_000, margin_ms=300, clock=clock)
    lease.renewed(sent_at=clock.t)
    quick = _SlowConnect(clock, connect_takes_s=0.1)
    await request_through(lease, quick)
    assert quick.sent and quick.sent[0].startswith(b"POST /exec")  # within the lease: sent
    paused = _SlowConnect(clock, connect_takes_s=5.0)
    with pytest.raises(LeaseExpiredError, match="an HTTP request"):
        await request_through(lease, paused)
    assert paused.sent == []  # the connection was made, not one byte of the request went out


async def test_the_worker_client_refuses_before_connecting_once_past_the_deadline() -> None:
    clock = FakeClock()
    lease = WorkerLease(lease_ms=2_000, margin_ms=300, clock=clock)
    client = lease_guarded_client(lease, httpx.Limits(max_connections=4))
    try:
        with pytest.raises(LeaseExpiredError):
            await client.post("http://127.0.0.1:9/exec", content=b"{}")  # nothing listens there
    finally:
        await client.aclose()
