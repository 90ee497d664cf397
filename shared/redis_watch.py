"""Whether Redis answers now: every node PINGed on a client of its own that never retries (the
processes' clients retry quietly for tens of seconds a call), each change told to an OutageLog.

The worker waits on it at start-up and watches with it while it serves (its /readyz); the API
waits on it in the background while it already serves /healthz and /readyz, and watches with it
after (its /readyz, its loops' quiet during an outage)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.outage_log import OutageLog
from shared.partitions import Partitions
from shared.settings import Settings

__all__ = ["RedisWatch"]

PING_TIMEOUT_S = 2.0


class RedisWatch:
    def __init__(
        self, settings: Settings, outage: OutageLog, *, interval_s: float = 1.0, up_interval_s: float = 5.0
    ) -> None:
        self.settings = settings
        self.outage = outage
        self.interval_s = interval_s  # between probes during an outage: its end is seen within this
        # between probes while Redis answers: an outage's start is seen at once by the first loop
        # whose call fails (in_outage), so the probes are only a backstop then
        self.up_interval_s = max(interval_s, up_interval_s)
        self._probe: Partitions[Any] | None = None

    @property
    def up(self) -> bool:
        """Redis answered the last probe (and no probe has failed since)."""
        return not self.outage.active

    def in_outage(self, exc: BaseException | None = None) -> bool:
        """Whether a loop's failed call (``exc``) belongs to an outage, which is then logged once:
        a connection error or timeout begins one (if none is under way; the probes end it), so the
        loop logs its own failure at debug level only. Other errors (a script's) are the loop's to
        log. Without ``exc``: whether an outage is under way."""
        if exc is not None and isinstance(exc, (RedisConnectionError, RedisTimeoutError, OSError)):
            self.outage.unreachable(_reason(exc))
        return self.outage.active

    async def check(self) -> bool:
        """One probe of every node: True if each answered a PING within 2 s; the outage log told."""
        try:
            if self._probe is None:
                probe: Partitions[Any] = Partitions.from_settings(
                    self.settings, retries=0, socket_timeout=PING_TIMEOUT_S
                )
                self._probe = probe
                await probe.start()  # a cluster's slot map: its masters
            clients = self._probe.topology.clients()
            await asyncio.wait_for(asyncio.gather(*(c.ping() for c in clients)), PING_TIMEOUT_S)
        except (RedisError, OSError, RuntimeError, TimeoutError) as exc:
            self.outage.unreachable(_reason(exc))
            await self._drop_probe()  # a new one next time: a cluster's masters may have changed
            return False
        self.outage.reachable()
        return True

    async def wait_reachable(self) -> None:
        """Until every node answers, probing a quarter second apart at first, then every 2 s (a
        connection attempt each: cheap, and the process is ready at most 2 s after Redis is)."""
        attempt = 0
        while not await self.check():
            attempt += 1
            await asyncio.sleep(min(2.0, 0.25 * 2 ** min(attempt, 3)))

    async def run_forever(self) -> None:
        """Probe every ``interval_s`` during an outage, every ``up_interval_s`` while Redis answers
        (each change logged once), until cancelled."""
        try:
            ticks = max(1, round(self.up_interval_s / self.interval_s))
            while True:
                for _ in range(ticks):
                    await asyncio.sleep(self.interval_s)
                    if self.outage.active:  # under way, or begun by a loop's failed call: probe now
                        break
                await self.check()
        finally:
            await self._drop_probe()

    async def aclose(self) -> None:
        await self._drop_probe()

    async def _drop_probe(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            with contextlib.suppress(Exception):
                await probe.aclose()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {PING_TIMEOUT_S:g} s"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
