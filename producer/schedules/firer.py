"""The firing loop every worker and API process runs (unless AGENTMILL_SCHEDULES=false): claim the
due schedules of every partition, make each one's due firings as runs, advance it.

Exactly one run per firing, however many firers race: a firing's run id is derived from the schedule
and the firing time (store.run_id_of) and made through the normal submission path (the Producer's
Submitter), which creates a run id once; the claim (schedule_claim.lua) is a lease, so a firer that
dies holding it (SIGKILL between a run and the advance) leaves the schedule to the next firer once
the lease expires, which makes the same firings again (nothing new) and the ones missed since,
under the catch-up rule (producer.schedules.cron). The advance (schedule_advance.lua) applies only
if no other firer advanced the schedule meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any

import orjson
from redis.exceptions import RedisError

from agentmill_client.schedules import Overlap
from producer.routing import Parts, run_many, run_script
from producer.schedules.cron import CronError, timing
from producer.schedules.store import read_schedule, run_id_of
from producer.service import Producer
from producer.submission import SubmissionError
from shared import keys
from shared.fields import ScheduleField
from shared.profiles import AgentProfile
from shared.quotas import Quotas
from shared.scripts import text
from shared.settings import Settings

__all__ = ["CLAIM_LIMIT", "Firer", "fire_forever"]

log = logging.getLogger("agentmill.schedules")
SF = ScheduleField
CLAIM_LIMIT = 100  # schedules one firer claims on a partition per look


class Firer:
    """Fires the due schedules of ``producer``'s partitions. ``on_fired``: called after each run a
    firing made and before the schedule is advanced (a worker's failpoint)."""

    def __init__(
        self,
        producer: Producer,
        *,
        on_fired: Callable[[], None] | None = None,
        in_outage: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.producer = producer
        self.settings = producer.settings
        self.quotas = Quotas(self.settings)
        self.on_fired = on_fired
        # The process's RedisWatch.in_outage: True when a failed look belongs to a Redis outage,
        # logged once there (shared/outage_log.py); it then goes to the debug log, not a warning a poll
        self.in_outage = in_outage or (lambda exc: False)

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Look for due schedules every AGENTMILL_SCHEDULE_POLL_MS (jittered) until ``stop``."""
        every = self.settings.schedule_poll_ms / 1000.0
        while not stop.is_set():
            try:
                await self.fire_due()
            except (RedisError, OSError) as exc:
                level = logging.DEBUG if self.in_outage(exc) else logging.WARNING
                log.log(level, "schedules: a look for due schedules failed: %s", exc)
            except Exception:  # a bug must not end this process's firing for good
                log.exception("schedules: a look for due schedules failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every * random.uniform(0.8, 1.2))

    async def fire_due(self) -> int:
        """One look: claim every partition's due schedules (one round trip per node) and fire them.
        Returns the runs made."""
        parts = self.producer.parts
        calls = [(p, [p.schedules_due], [self.settings.schedule_lease_ms, CLAIM_LIMIT]) for p in parts.parts]
        replies = await run_many(parts, self.producer.scripts.schedule_claim, calls)
        work = [
            self.fire(p, text(k), int(reply[0]))
            for p, reply in zip(parts.parts, replies, strict=True)
            for k in reply[1:]
        ]
        if not work:
            return 0
        made = 0
        for r in await asyncio.gather(*work, return_exceptions=True):
            if isinstance(r, BaseException):
                log.warning("schedules: a firing failed (its claim expires, another firer retries): %r", r)
            else:
                made += r
        return made

    async def fire(self, part: keys.Partition, key: str, now: int) -> int:
        """Make a claimed schedule's firings due at ``now`` (Redis time); advance it. Returns the
        runs made."""
        parts = self.producer.parts
        h = await read_schedule(parts, part, key)
        read = h.get(SF.NEXT_FIRE, "")
        if not h or h.get(SF.PAUSED) == "1":  # deleted or paused meanwhile: the advance drops it
            await self._advance(part, key, read, read, 0, 0, "", "", "")
            return 0
        try:
            due = timing(h[SF.CRON], h[SF.TIMEZONE]).due(int(read), now, int(h[SF.CATCHUP]))
        except CronError as exc:  # a time zone this process does not know: leave it to another
            log.warning("schedules: %s cannot be read here: %s", h[SF.CLIENT_ID], exc)
            return 0
        tenant, sid = h[SF.TENANT], h[SF.CLIENT_ID]
        template: dict[str, Any] = orjson.loads(h[SF.INPUT])
        meta = {
            "schedule": sid,
            **{k: v for k, v in (template.get("metadata") or {}).items() if k != "schedule"},
        }
        last_run, made, skipped, error = h.get(SF.LAST_RUN, ""), 0, due.skipped, ""
        for fire_ms in due.fire:
            rid = run_id_of(sid, fire_ms)
            if h[SF.OVERLAP] != Overlap.ENQUEUE and last_run and last_run != rid:
                prev = await self.producer.get(last_run, tenant=tenant)
                if prev is not None and not prev.status.terminal:
                    if h[SF.OVERLAP] == Overlap.SKIP:
                        skipped += 1
                        continue
                    await self.producer.abort(
                        prev.key, reason=f"replaced by the next firing of schedule {sid}", tenant=tenant
                    )
            try:
                await self.producer.submit(
                    {**template, "runId": rid, "metadata": meta}, tenant=tenant, quota=self.quotas.of(tenant)
                )
            except SubmissionError as exc:
                skipped, error = skipped + 1, f"{rid}: {exc.code}: {exc.message}"
                continue
            made, last_run = made + 1, rid
            if self.on_fired is not None:
                self.on_fired()
        last_fire = str(due.fire[-1]) if due.fire else ""
        await self._advance(part, key, read, str(due.next_ms), made, skipped, last_fire, last_run,
                            error or ("-" if made else ""))  # fmt: skip
        return made

    async def _advance(
        self, part: keys.Partition, key: str, read: str, new: str, made: int, skipped: int,
        last_fire: str, last_run: str, error: str,
    ) -> str:  # fmt: skip
        return text(
            await run_script(
                self.producer.parts, self.producer.scripts.schedule_advance, part,
                [part.schedule(key), part.schedules_due],
                [key, read, new or "0", made, skipped, last_fire, last_run, error],
            )
        )  # fmt: skip


async def fire_forever(
    parts: Parts, settings: Settings, profiles: dict[str, AgentProfile], on_fired: Callable[[], None]
) -> None:
    """A worker's firing loop, until cancelled (with the worker's other loops)."""
    producer = Producer(parts, settings=settings, profiles=profiles)
    await Firer(producer, on_fired=on_fired).run_forever(asyncio.Event())
