"""The firing loop every worker and API process runs (unless AGENTMILL_SCHEDULES=false): claim the
due schedules of every partition, make each one's due firings as runs, advance it.

Exactly one run per firing, however many firers race: a firing's run id is derived from the schedule
and the firing time (store.run_id_of) and made through the normal submission path (the Producer's
Submitter), which creates a run id once; the claim (schedule_claim.lua) is a lease, so a firer that
dies holding it (SIGKILL between a run and the advance) leaves the schedule to the next firer once
the lease expires, which makes the same firings again (nothing new) and the ones missed since,
under the catch-up rule (producer.schedules.cron). The advance (schedule_advance.lua) applies only
if no other firer advanced the schedule meanwhile.

Fair across tenants: a look claims at most CLAIM_LIMIT schedules of a partition, an equal share
of them for each tenant with schedules due and at most TENANT_SHARE (schedule_claim.lua), so
however large one tenant's backlog, a look makes the firings of at most TENANT_SHARE of its
schedules, and another tenant's due schedule is claimed at the next look of any firer: it is late by
at most AGENTMILL_SCHEDULE_POLL_MS (+20 %) plus one look's work. A tenant's schedules make at
most scheduleFiringsPerMinute firings per UTC minute together (shared.quotas; schedule_rate.lua):
the others are skipped, counted in ``skipped`` with a ``lastError`` naming the cap, never made
later (as a missed cron firing). The lag of each firing is agentmill_schedule_firing_lag_seconds
(producer.schedules.lag).

A schedule of a tenant no running API process's token names (producer.schedules.live), whose
quota disables it, or whose day budget is spent (producer.schedules.holds) is held, and so is each
schedule past its tenant's maxSchedules (a quota lowered below what the tenant has: its oldest
schedules fire): not fired, its
firings counted as skipped, ``held`` saying why (``pausedReason`` in its view), looked at again
once a lease later; when nothing holds it any more it fires from its next firing after then.

A firer without AGENTMILL_ID_SECRET leaves a named tenant's schedule alone (claimed, not fired, not
advanced: once its claim expires a firer holding the secret makes the firings, under the catch-up
rule), and says so once: the runs it would make would be kept under the development key, listed
but unreadable to every process that has the real one (shared.tenants).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client import CollectorRegistry
from redis.exceptions import RedisError

from agentmill_client.schedules import Overlap
from producer.schedules.cron import CronError, Due, timing
from producer.schedules.holds import capped_schedules, held_tenants, over_cap_reason
from producer.schedules.lag import FiringLag
from producer.schedules.live import read_live_tenants
from producer.schedules.store import end_of, first_after, read_schedule, run_id_of
from producer.service import Producer
from producer.submission import SubmissionError
from shared import keys
from shared.actors import system
from shared.calls.schedules import (
    ScheduleAdvance,
    ScheduleAdvanceVerdict,
    ScheduleClaim,
    ScheduleRate,
)
from shared.fields import ScheduleField
from shared.profiles import AgentProfile
from shared.quotas import DEFAULT_TENANT, Quotas
from shared.replies import text
from shared.script_sending import Parts, run_many, run_script
from shared.settings import Settings

__all__ = [
    "CLAIM_LIMIT",
    "MIGRATE_EVERY",
    "TENANT_CONCURRENCY",
    "TENANT_SHARE",
    "Firer",
    "Look",
    "fire_forever",
]

log = logging.getLogger("agentmill.schedules")
SF = ScheduleField
CLAIM_LIMIT = 100  # schedules one firer claims on a partition per look
TENANT_SHARE = 20  # schedules of one tenant one firer claims on a partition per look, at most
# A tenant's schedules one firer fires at once in a look: another tenant's firing shares the
# process with at most this many of each other tenant's.
TENANT_CONCURRENCY = 8
# One look in this many (the first included) also moves the schedules an older version left in its
# single due set: a rolling upgrade's old API processes may still add to it for a while.
MIGRATE_EVERY = 64


@dataclass(frozen=True, slots=True)
class Look:
    """One look for due schedules: Redis's clock at the claim (ms), this process's monotonic clock
    then, and the tenants whose schedules are held, each with why (producer.schedules.holds)."""

    now: int
    at: float
    held: Mapping[str, str] = field(default_factory=dict)
    # tenant -> the schedules that may fire, for a tenant over its maxSchedules (the rest held)
    capped: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def redis_ms(self) -> float:
        """Redis's clock now, as this process follows it from the claim."""
        return self.now + (time.monotonic() - self.at) * 1000


class Firer:
    """Fires the due schedules of ``producer``'s partitions. ``on_fired``: called after each run a
    firing made and before the schedule is advanced (a worker's failpoint)."""

    def __init__(
        self,
        producer: Producer,
        *,
        on_fired: Callable[[], None] | None = None,
        lag: FiringLag | None = None,
        in_outage: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.producer = producer
        self.lag = lag
        self.settings = producer.settings
        self.quotas = Quotas(self.settings)
        self.on_fired = on_fired
        self.looks = 0  # looks made: every MIGRATE_EVERY-th moves an older version's due set
        self.keyless_said = False  # a named tenant's firing refused for want of AGENTMILL_ID_SECRET, logged
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
        """One look: claim every partition's due schedules (one round trip per node; a share per
        tenant: schedule_claim.lua) and fire them. Returns the runs made. The live tenants are read
        only when something was claimed: a look that finds nothing due is that one round trip."""
        parts = self.producer.parts
        lease = self.settings.schedule_lease_ms
        migrate = "1" if self.looks % MIGRATE_EVERY == 0 else ""
        self.looks += 1
        claims = [(p, ScheduleClaim(lease, CLAIM_LIMIT, p.schedules_due_prefix, p.schedule_prefix, TENANT_SHARE,
                                    migrate)) for p in parts.parts]  # fmt: skip
        calls = [(p, c.keys(p), c.argv()) for p, c in claims]
        replies = await run_many(parts, self.producer.scripts.schedule_claim, calls)
        at = time.monotonic()
        claimed = [(p, reply) for p, reply in zip(parts.parts, replies, strict=True) if len(reply) > 1]
        if not claimed:
            return 0
        now = int(claimed[0][1][0])
        tenants = {text(reply[i + 1]) for _, reply in claimed for i in range(1, len(reply), 2)}
        held = await held_tenants(parts, self.quotas, await read_live_tenants(parts), tenants, now)
        look = Look(now, at, held, await capped_schedules(parts, self.quotas, tenants - held.keys()))
        lanes: dict[str, asyncio.Semaphore] = {}  # a tenant's firings made at once in this look
        work = [
            self.fire(p, text(reply[i]), Look(int(reply[0]), at, look.held, look.capped),
                      lanes.setdefault(text(reply[i + 1]), asyncio.Semaphore(TENANT_CONCURRENCY)))
            for p, reply in claimed
            for i in range(1, len(reply), 2)
        ]  # fmt: skip
        made = 0
        for r in await asyncio.gather(*work, return_exceptions=True):
            if isinstance(r, BaseException):
                log.warning("schedules: a firing failed (its claim expires, another firer retries): %r", r)
            else:
                made += r
        return made

    async def fire(
        self, part: keys.Partition, key: str, look: Look, lane: asyncio.Semaphore | None = None
    ) -> int:
        """Make a claimed schedule's firings due at the look (Redis time); advance it, holding
        ``lane`` (its tenant's in this look). Returns the runs made."""
        async with lane or contextlib.nullcontext():
            return await self._fire(part, key, look)

    async def _fire(self, part: keys.Partition, key: str, look: Look) -> int:
        now = look.now
        parts = self.producer.parts
        h = await read_schedule(parts, part, key)
        if not h:  # deleted meanwhile: the delete took it out of its due set
            return 0
        read, tenant, sid = h.get(SF.NEXT_FIRE, ""), h[SF.TENANT], h[SF.CLIENT_ID]
        if h.get(SF.PAUSED) == "1":  # paused meanwhile: the advance drops it
            await self._advance(part, key, tenant, read, read, 0, 0)
            return 0
        try:
            t = timing(h[SF.CRON], h[SF.TIMEZONE])
        except CronError as exc:  # a time zone this process does not know: leave it to another
            log.warning("schedules: %s cannot be read here: %s", sid, exc)
            return 0
        end = end_of(h)
        held = look.held.get(tenant, "")
        if not held and (allowed := look.capped.get(tenant)) is not None and key not in allowed:
            held = over_cap_reason(tenant, self.quotas.of(tenant).max_schedules)
        if h.get(SF.HELD) and not held:  # its tenant is back: from its next firing (as on a resume)
            due = Due([], 0, first_after(t, now, end))
        else:
            due = t.due(int(read), now, int(h[SF.CATCHUP]))
            if end is not None:
                due = Due([f for f in due.fire if f <= end], due.skipped,
                          0 if due.next_ms > end else due.next_ms)  # fmt: skip
        if held:  # skipped and looked at again once a lease from now, not at every firing
            again = max(due.next_ms, now + self.settings.schedule_lease_ms)
            await self._advance(part, key, tenant, read, str(due.next_ms), 0, due.skipped + len(due.fire),
                                held=held, due_at=str(again))  # fmt: skip
            return 0
        if tenant != DEFAULT_TENANT and not self.settings.id_secret:
            self._refuse_keyless(tenant, sid)
            return 0
        quota = self.quotas.of(tenant)
        fire, skipped, error = due.fire, due.skipped, ""
        if fire and quota.schedule_firings_per_minute:
            granted = await self._rate(tenant, len(fire), quota.schedule_firings_per_minute)
            if granted < len(fire):  # the latest ones are made, as after an outage
                skipped += len(fire) - granted
                error = (f"schedule_rate_exceeded: tenant {tenant}'s schedules made "
                         f"{quota.schedule_firings_per_minute} firings this minute, its scheduleFiringsPerMinute "
                         f"(AGENTMILL_TENANT_SCHEDULE_FIRINGS_PER_MINUTE); {len(fire) - granted} skipped")  # fmt: skip
                fire = fire[len(fire) - granted :]
        template: dict[str, Any] = orjson.loads(h[SF.INPUT])
        meta = {
            "schedule": sid,
            **{k: v for k, v in (template.get("metadata") or {}).items() if k != "schedule"},
        }
        last_run, made = h.get(SF.LAST_RUN, ""), 0
        for fire_ms in fire:
            rid = run_id_of(sid, fire_ms)
            if h[SF.OVERLAP] != Overlap.ENQUEUE and last_run and last_run != rid:
                prev = await self.producer.get(last_run, tenant=tenant)
                if prev is not None and not prev.status.terminal:
                    if h[SF.OVERLAP] == Overlap.SKIP:
                        skipped += 1
                        continue
                    await self.producer.abort(
                        prev.key, reason=f"replaced by the next firing of schedule {sid}", tenant=tenant,
                        actor=system("schedule"),
                    )  # fmt: skip
            try:
                await self.producer.submit(
                    {**template, "runId": rid, "metadata": meta}, tenant=tenant, quota=quota
                )
            except SubmissionError as exc:
                skipped, error = skipped + 1, f"{rid}: {exc.code}: {exc.message}"
                continue
            made, last_run = made + 1, rid
            if self.lag is not None:
                self.lag.observe(tenant, (look.redis_ms() - fire_ms) / 1000)
            if self.on_fired is not None:
                self.on_fired()
        last_fire = str(due.fire[-1]) if due.fire else ""
        await self._advance(part, key, tenant, read, str(due.next_ms), made, skipped, last_fire, last_run,
                            error or ("-" if made else ""))  # fmt: skip
        return made

    async def _rate(self, tenant: str, want: int, cap: int) -> int:
        """The firings of ``want`` the tenant's per-minute cap grants now (schedule_rate.lua)."""
        home = self.producer.parts.layout.home(tenant)
        call = ScheduleRate(tenant, want, cap)
        granted = await run_script(
            self.producer.parts, self.producer.scripts.schedule_rate, home, call.keys(home), call.argv()
        )
        return int(granted)

    def _refuse_keyless(self, tenant: str, sid: str) -> None:
        if not self.keyless_said:
            self.keyless_said = True
            log.error(
                "schedules: AGENTMILL_ID_SECRET is not set in this process: it fires no named tenant's "
                "schedule (first: %s of tenant %s), as their runs would be unreadable; set the API's "
                "AGENTMILL_ID_SECRET here, or AGENTMILL_SCHEDULES=false",
                sid,
                tenant,
            )

    async def _advance(
        self, part: keys.Partition, key: str, tenant: str, read: str, new: str, made: int, skipped: int,
        last_fire: str = "", last_run: str = "", error: str = "", *, held: str = "", due_at: str = "",
    ) -> ScheduleAdvanceVerdict:  # fmt: skip
        call = ScheduleAdvance(
            key, read, new or "0", made, skipped, last_fire, last_run, error, tenant, held, due_at
        )
        reply = await run_script(
            self.producer.parts, self.producer.scripts.schedule_advance, part, call.keys(part), call.argv()
        )
        return ScheduleAdvanceVerdict(text(reply))


async def fire_forever(
    parts: Parts,
    settings: Settings,
    profiles: dict[str, AgentProfile],
    on_fired: Callable[[], None],
    registry: CollectorRegistry | None = None,
) -> None:
    """A worker's firing loop, until cancelled (with the worker's other loops); its firing lag on
    ``registry`` (the worker's metrics)."""
    producer = Producer(parts, settings=settings, profiles=profiles)
    lag = FiringLag(registry) if registry is not None else None
    await Firer(producer, on_fired=on_fired, lag=lag).run_forever(asyncio.Event())
