"""The worker's /metrics and /healthz, served from its own event loop (no extra dependency).

A heartbeat task stamps the loop every 0.5 s and measures how late it woke (event-loop lag).
Because the server shares the loop, a blocked loop cannot answer at all, so the kubelet's probe
times out; and /healthz reports the heartbeat's age, so a loop that was blocked and recovers says
so (503 while the last beat is older than the threshold). Until the worker has reached Redis and
taken its lease, /healthz answers 503 ``starting`` (the server starts first, so a worker waiting
for Redis is visible as such instead of silent). /readyz answers as /healthz, and 503
``redis_unreachable`` while Redis does not answer the worker's probe (shared/redis_watch.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import orjson
from prometheus_client import CollectorRegistry, Gauge, Histogram

__all__ = ["BEAT_S", "LAG_BUCKETS", "METRICS_TYPE", "HealthServer"]


BEAT_S = 0.5
METRICS_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class HealthServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        render: Callable[[], bytes],
        *,
        stale_after_s: float = 5.0,
        ready: bool = True,
        redis_up: Callable[[], bool] = lambda: True,
    ) -> None:
        self.render = render
        self.stale_after_s = stale_after_s
        self.last_beat = time.monotonic()
        self.ready = ready  # the worker sets it once it has reached Redis and taken its lease
        self.redis_up = redis_up  # the worker's RedisWatch: False from an outage's first failed probe
        self.lag = Histogram(
            "agentmill_event_loop_lag_seconds",
            "How late the worker's event loop ran a timer.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.beat_age = Gauge(
            "agentmill_heartbeat_age_seconds",
            "Seconds since the worker's event loop last beat.",
            registry=registry,
        )
        self.beat_age.set_function(lambda: time.monotonic() - self.last_beat)
        self._server: asyncio.Server | None = None
        self._beat: asyncio.Task[None] | None = None

    async def start(self, host: str = "0.0.0.0", port: int = 9100) -> int:
        self._beat = asyncio.create_task(self._heartbeat())
        self._server = await asyncio.start_server(self._handle, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def start_unix(self, path: str) -> None:
        """On a Unix socket instead of a port (a process of ``agentmill worker --processes``)."""
        self._beat = asyncio.create_task(self._heartbeat())
        self._server = await asyncio.start_unix_server(self._handle, path)

    async def stop(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _heartbeat(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(BEAT_S)
            now = time.monotonic()
            self.lag.observe(max(0.0, now - t - BEAT_S))
            self.last_beat = now

    def health(self) -> tuple[int, bytes]:
        age = time.monotonic() - self.last_beat
        ok = age < self.stale_after_s and self.ready
        status = "starting" if not self.ready else "ok" if ok else "stale"
        body = orjson.dumps({"status": status, "heartbeatAgeS": round(age, 3)})
        return (200 if ok else 503), body

    def readiness(self) -> tuple[int, bytes]:
        """/readyz: alive, started, and Redis answering now (during an outage the worker lives on,
        its runs waiting, but is not ready: /healthz, the liveness probe, stays 200)."""
        status, body = self.health()
        if status == 200 and not self.redis_up():
            return 503, orjson.dumps({"status": "redis_unreachable"})
        return status, body

    async def answer(self, path: bytes) -> tuple[int, bytes, bytes]:
        """Status, body and content type for a GET of ``path``."""
        if path.startswith(b"/metrics"):
            return 200, self.render(), METRICS_TYPE
        if path.startswith(b"/healthz"):
            return (*self.health(), b"application/json")
        if path.startswith(b"/readyz"):
            return (*self.readiness(), b"application/json")
        return 404, b'{"status":"not found"}', b"application/json"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            path = request.split(b" ")[1] if request.count(b" ") >= 2 else b"/"
            status, body, ctype = await self.answer(path)
            reason = {200: b"OK", 404: b"Not Found", 503: b"Service Unavailable"}[status]
            writer.write(
                b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                % (status, reason, ctype, len(body))
            )
            writer.write(body)
            await writer.drain()
        except (TimeoutError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
