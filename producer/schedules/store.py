"""A tenant's schedules in Redis: create, read, list, pause, resume, delete.

A schedule is kept like a run: under its tenant's key of the id its client chose (producer.scope:
``tsc_…`` for a named tenant, so another tenant's id answers nothing), at that key's home partition,
with its hash, its entry in the tenant's index there and, while not paused, in the tenant's due set
there, which the firers claim from (producer.schedules.firer). Every change is one script
(shared/lua/schedule_*.lua).

A tenant's schedules are bounded: maxSchedules of them (shared.quotas; counted at creation, the
tenant's schedules on the other partitions read just before, so creations racing on several
partitions may pass it by the few in flight), and each run template at most
MAX_SCHEDULE_INPUT_BYTES as stored.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

import orjson
from redis.asyncio import Redis

from agentmill_client import limits
from agentmill_client.schedules import ScheduleInput, ScheduleView
from producer.admission import check_enabled
from producer.agent_choice import AgentChoice
from producer.agents import Ref
from producer.schedules.cron import CronError, Timing, timing
from producer.schemas_ready import schemas_ready
from producer.scope import SCOPED_PREFIX
from producer.service import Producer
from producer.submission import SubmissionError
from shared import keys
from shared.calls.schedules import (
    ScheduleCreate,
    ScheduleDelete,
    ScheduleDeleteVerdict,
    SchedulePause,
    SchedulePauseVerdict,
)
from shared.fields import ScheduleField
from shared.quotas import Quotas
from shared.replies import text
from shared.script_sending import Parts, run_script

__all__ = [
    "MAX_SHOWN", "ScheduleStore", "end_of", "first_after", "now_ms", "read_schedule", "run_id_of", "view_of",
]  # fmt: skip

SF = ScheduleField
MAX_SHOWN = 100  # next firing times a view shows at most


def now_ms() -> int:
    """This process's clock (the firings compare with Redis's: schedule_claim.lua)."""
    return int(time.time() * 1000)


def run_id_of(schedule_id: str, fire_ms: int) -> str:
    """The run a schedule's firing makes, as its client knows it: the schedule id and the firing
    (UTC, to the second), so every firer names it alike and making it again creates nothing."""
    return f"{schedule_id}:{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(fire_ms // 1000))}"


class ScheduleStore:
    """The schedules of every tenant, through ``producer``'s partitions."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.parts = producer.parts
        self.scripts = producer.scripts
        self.quotas = Quotas(producer.settings)

    def where(self, schedule_id: str, tenant: str) -> tuple[str, keys.Partition]:
        """The key ``tenant``'s schedule ``schedule_id`` is kept under, and its partition."""
        key = self.producer.scope(tenant).key(schedule_id)
        return key, self.parts.layout.home(key)

    # ---- creating ----

    def check(
        self,
        body: ScheduleInput,
        tenant: str,
        schedule_id: str,
        choices: Mapping[Ref, AgentChoice] | None = None,
    ) -> Timing:
        """The schedule's Timing, its run template validated as a run of ``tenant`` (``choices``: the
        tenant's agent it names, producer.agents; each firing is pinned to the version it gets
        then); else SubmissionError naming the field."""
        if schedule_id.startswith(SCOPED_PREFIX):
            raise SubmissionError("reserved_id", f"scheduleId: ids starting with {SCOPED_PREFIX!r} are reserved",
                                  field="scheduleId")  # fmt: skip
        try:
            t = timing(body.cron, body.timezone)
        except CronError as exc:
            raise SubmissionError("invalid_schedule", str(exc), field=exc.field) from None
        if "runId" in body.input or "run_id" in body.input:
            raise SubmissionError(
                "invalid_input", "input.runId: each firing names its run; leave it out", field="input.runId"
            )
        try:
            self.producer.submitter.prepare(
                {**body.input, "runId": run_id_of(schedule_id, 0)}, tenant, choices=choices
            )
        except SubmissionError as exc:
            exc.field = f"input.{exc.field}" if exc.field else "input"
            exc.message = f"input.{exc.message}"
            raise
        return t

    async def create(self, body: ScheduleInput, tenant: str, schedule_id: str) -> tuple[ScheduleView, bool]:
        """(the schedule, whether it was created now); 409 ``conflict`` when its id holds another
        definition."""
        check_enabled(tenant, self.quotas.of(tenant))
        await schemas_ready([body.input])  # off the loop, before check validates its template
        t = self.check(body, tenant, schedule_id, await self.producer.submitter.choices(tenant, [body.input]))
        template = orjson.dumps(body.input, option=orjson.OPT_SORT_KEYS).decode()
        if len(template.encode()) > limits.MAX_SCHEDULE_INPUT_BYTES:
            raise SubmissionError(
                "too_large",
                f"input: {len(template.encode())} bytes as JSON; a schedule's run template holds at most "
                f"{limits.MAX_SCHEDULE_INPUT_BYTES} (MAX_SCHEDULE_INPUT_BYTES)",
                status=413, field="input",
            )  # fmt: skip
        end = "" if body.end_at is None else str(body.end_at)
        definition = [t.expr, body.timezone, template, body.overlap.value, str(body.catchup)]
        if end:
            definition.append(end)
        digest = hashlib.sha256("\0".join(definition).encode()).hexdigest()
        key, part = self.where(schedule_id, tenant)
        first = first_after(t, now_ms(), body.end_at)
        cap = self.quotas.of(tenant).max_schedules
        elsewhere = await self._count_elsewhere(tenant, part) if cap else 0
        call = ScheduleCreate(tenant, schedule_id, digest, t.expr, body.timezone, template, body.overlap.value,
                              body.catchup, first, key, cap, elsewhere, end)  # fmt: skip
        verdict = ScheduleCreate.verdict(
            await run_script(self.parts, self.scripts.schedule_create, part, call.keys(part), call.argv())
        ).value
        if verdict == "conflict":
            raise SubmissionError("conflict", f"schedule {schedule_id} already exists with another definition",
                                  status=409, field="scheduleId")  # fmt: skip
        if verdict == "full":
            raise SubmissionError(
                "schedule_quota_exceeded",
                f"tenant {tenant} has {cap} schedules, its maxSchedules (AGENTMILL_TENANT_MAX_SCHEDULES or "
                "its AGENTMILL_TENANT_QUOTAS entry); delete one first",
                status=429,
            )
        view = await self.get(schedule_id, tenant)
        assert view is not None
        return view, verdict == "created"

    async def _count_elsewhere(self, tenant: str, home: keys.Partition) -> int:
        """The tenant's schedules on the partitions other than ``home`` (one round trip per node)."""
        if len(self.parts.parts) == 1:
            return 0

        def op(pipe: Any, p: keys.Partition) -> None:
            pipe.zcard(p.schedule_index(tenant))

        counts = await self.parts.each(op)
        return sum(int(r[0]) for p, r in zip(self.parts.parts, counts, strict=True) if p.index != home.index)

    # ---- reading ----

    async def get(self, schedule_id: str, tenant: str, shown: int = 5) -> ScheduleView | None:
        key, part = self.where(schedule_id, tenant)
        found = await read_schedule(self.parts, part, key)
        if not found or found.get(SF.TENANT) != tenant:
            return None
        return view_of(found, shown)

    async def list(self, tenant: str, limit: int = 100) -> tuple[list[ScheduleView], bool]:
        """The tenant's oldest ``limit`` schedules (every partition's index: one round trip per node,
        then their hashes), and whether it has more."""

        def op(pipe: Any, p: keys.Partition) -> None:
            pipe.zrange(p.schedule_index(tenant), 0, limit, withscores=True)

        found: list[tuple[float, str, keys.Partition]] = []
        for p, reply in zip(self.parts.parts, await self.parts.each(op), strict=True):
            found += [(score, text(k), p) for k, score in reply[0]]
        found.sort(key=lambda f: (f[0], f[1]))
        more = len(found) > limit
        found = found[:limit]

        def read(p: keys.Partition, k: str) -> Any:
            return lambda pipe: pipe.hgetall(p.schedule(k))

        replies = await self.parts.pipelined([(p, read(p, k)) for _, k, p in found]) if found else []
        views = [view_of(h, 1) for r in replies if (h := _decoded(r[0])) and h.get(SF.TENANT) == tenant]
        return views, more

    # ---- control ----

    async def delete(self, schedule_id: str, tenant: str) -> bool:
        key, part = self.where(schedule_id, tenant)
        call = ScheduleDelete(key, tenant)
        verdict = await run_script(
            self.parts, self.scripts.schedule_delete, part, call.keys(part), call.argv()
        )
        return ScheduleDelete.verdict(verdict) is ScheduleDeleteVerdict.DELETED

    async def pause(self, schedule_id: str, tenant: str, paused: bool) -> SchedulePauseVerdict:
        """paused | resumed | unchanged | unknown. A resumed schedule's next firing is the first after now."""
        key, part = self.where(schedule_id, tenant)
        next_fire = 0
        if not paused:
            h = await read_schedule(self.parts, part, key)
            if not h or h.get(SF.TENANT) != tenant:
                return SchedulePauseVerdict.UNKNOWN
            next_fire = first_after(timing(h[SF.CRON], h[SF.TIMEZONE]), now_ms(), end_of(h))
        call = SchedulePause(key, tenant, "1" if paused else "", next_fire)
        verdict = await run_script(
            self.parts, self.scripts.schedule_pause, part, call.keys(part), call.argv()
        )
        return SchedulePauseVerdict(SchedulePause.verdict(verdict))


def end_of(h: dict[str, str]) -> int | None:
    """A schedule's endAt (ms), None when it has none."""
    return int(h[SF.END_AT]) if h.get(SF.END_AT) else None


def first_after(t: Timing, at_ms: int, end_ms: int | None) -> int:
    """The schedule's first firing after ``at_ms``; 0 when that is past its end (no more firings)."""
    first = t.after(at_ms)[0]
    return 0 if end_ms is not None and first > end_ms else first


async def read_schedule(parts: Parts, part: keys.Partition, key: str) -> dict[str, str]:
    """A schedule's hash, decoded ({} when there is none)."""

    async def read(c: Redis) -> Any:
        return await c.hgetall(part.schedule(key))  # type: ignore[misc]

    return _decoded(await parts.call(part, read))


def _decoded(h: Any) -> dict[str, str]:
    return {text(k): text(v) for k, v in (h or {}).items()}


def view_of(h: dict[str, str], shown: int) -> ScheduleView:
    """A schedule's hash as its view, with its next ``shown`` firing times (none while paused)."""
    held = h.get(SF.HELD) or None
    paused = h.get(SF.PAUSED) == "1" or held is not None
    next_fire = int(h.get(SF.NEXT_FIRE) or 0)
    end = end_of(h)
    times: list[int] = []
    if not paused and shown > 0 and next_fire:
        shown = min(shown, MAX_SHOWN)
        times = (
            [next_fire, *timing(h[SF.CRON], h[SF.TIMEZONE]).after(next_fire, shown - 1)]
            if shown > 1
            else [next_fire]
        )
        times = [t for t in times if end is None or t <= end]
    return ScheduleView(
        schedule_id=h[SF.CLIENT_ID],
        cron=h[SF.CRON],
        timezone=h[SF.TIMEZONE],
        input=orjson.loads(h[SF.INPUT]),
        overlap=h[SF.OVERLAP],
        catchup=int(h[SF.CATCHUP]),
        paused=paused,
        paused_reason="paused" if h.get(SF.PAUSED) == "1" else held,
        end_at=end,
        created_at=int(h[SF.CREATED_AT]),
        next_fire_times=times,
        last_fire_at=int(h[SF.LAST_FIRE]) if h.get(SF.LAST_FIRE) else None,
        last_run_id=h.get(SF.LAST_RUN) or None,
        fired=int(h.get(SF.FIRED) or 0),
        skipped=int(h.get(SF.SKIPPED) or 0),
        last_error=h.get(SF.LAST_ERROR) or None,
    )
