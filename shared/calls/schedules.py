"""Calls of a tenant's schedule scripts (producer/schedules/store.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = [
    "SayLiveTenants",
    "ScheduleAdvance",
    "ScheduleAdvanceVerdict",
    "ScheduleClaim",
    "ScheduleCreate",
    "ScheduleDelete",
    "ScheduleDeleteVerdict",
    "SchedulePause",
    "SchedulePauseVerdict",
    "ScheduleRate",
]


class ScheduleDeleteVerdict(StrEnum):
    UNKNOWN = "unknown"  # no such schedule of the tenant
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class ScheduleDelete(ScriptCall):
    """schedule_delete.lua: delete a tenant's schedule (the runs it made stay)."""

    SCRIPT = "schedule_delete"
    KEY_NAMES = ("schedule", "due", "due_tenants", "index")
    VERDICT = ScheduleDeleteVerdict

    schedule_key: str
    tenant: str

    def keys(self, part: Partition) -> list[str]:
        return [part.schedule(self.schedule_key), part.schedules_due(self.tenant), part.schedules_due_tenants,
                part.schedule_index(self.tenant)]  # fmt: skip


class SchedulePauseVerdict(StrEnum):
    UNKNOWN = "unknown"
    UNCHANGED = "unchanged"  # already as asked
    PAUSED = "paused"
    RESUMED = "resumed"


@dataclass(frozen=True, slots=True)
class SchedulePause(ScriptCall):
    """schedule_pause.lua: pause a tenant's schedule (out of the due set) or resume it at
    ``next_fire`` (the first firing after now, which the caller computed; 0: none before its end)."""

    SCRIPT = "schedule_pause"
    KEY_NAMES = ("schedule", "due", "due_tenants")
    VERDICT = SchedulePauseVerdict

    schedule_key: str
    tenant: str
    pause: str  # '1' pause | '' resume
    next_fire: int = 0

    def keys(self, part: Partition) -> list[str]:
        return [part.schedule(self.schedule_key), part.schedules_due(self.tenant), part.schedules_due_tenants]


@dataclass(frozen=True, slots=True)
class SayLiveTenants(ScriptCall):
    """live_tenants.lua: an API process says its tokens name ``tenants`` for the next ``ttl_ms``
    (producer.schedules.live); answers Redis's now (ms)."""

    SCRIPT = "live_tenants"
    KEY_NAMES = ("live", "before")  # the live tenants (zset tenant -> until), the set older versions kept

    ttl_ms: int
    tenants: tuple[str, ...]

    def keys(self, part: Partition) -> list[str]:
        return [part.live_tenants, part.live_tenants_before]


class ScheduleCreateVerdict(StrEnum):
    CREATED = "created"
    EXISTS = "exists"  # the same definition again: nothing changes
    CONFLICT = "conflict"  # the id exists with another definition
    FULL = "full"  # the tenant has its maxSchedules


@dataclass(frozen=True, slots=True)
class ScheduleCreate(ScriptCall):
    """schedule_create.lua: a tenant's schedule, made once (the same definition again is a no-op)."""

    SCRIPT = "schedule_create"
    KEY_NAMES = ("schedule", "due", "due_tenants", "index")
    VERDICT = ScheduleCreateVerdict

    tenant: str
    client_id: str
    digest: str
    cron: str
    timezone: str
    input: bytes | str  # the run template JSON
    overlap: str
    catchup: int
    next_fire: int  # ms; 0: it ends before its first firing
    schedule_key: str
    max_schedules: int  # 0 = no limit
    elsewhere: int  # the tenant's schedules on the other partitions
    end_at: str  # ms, '' = none

    def keys(self, part: Partition) -> list[str]:
        return [part.schedule(self.schedule_key), part.schedules_due(self.tenant), part.schedules_due_tenants,
                part.schedule_index(self.tenant)]  # fmt: skip


@dataclass(frozen=True, slots=True)
class ScheduleRate(ScriptCall):
    """schedule_rate.lua: the firings of ``want`` a tenant's per-minute cap grants now (answers how
    many)."""

    SCRIPT = "schedule_rate"
    KEY_NAMES = ("count",)  # the tenant's count (hash: minute, n)

    tenant: str
    want: int
    cap: int

    def keys(self, part: Partition) -> list[str]:
        return [part.schedule_rate(self.tenant)]


@dataclass(frozen=True, slots=True)
class ScheduleClaim(ScriptCall):
    """schedule_claim.lua: the partition's due schedules claimed for ``lease_ms``, fairly across
    tenants (at most ``limit`` in all, ``share`` a tenant); answers {now (ms), schedule key, its
    tenant, …}."""

    SCRIPT = "schedule_claim"
    KEY_NAMES = ("due_tenants", "due_before")  # the tenants with schedules due; older versions' one due set

    lease_ms: int
    limit: int
    due_prefix: str  # a tenant's due set's key is this and the tenant (Partition.schedules_due_prefix)
    schedule_prefix: str  # a schedule hash's key is this and its key (Partition.schedule_prefix)
    share: int  # a tenant's most per look
    migrate: str = ""  # '1': move the schedules older versions left in their one due set first

    def keys(self, part: Partition) -> list[str]:
        return [part.schedules_due_tenants, part.schedules_due_before]


class ScheduleAdvanceVerdict(StrEnum):
    GONE = "gone"  # deleted meanwhile: out of the due set
    MOVED = "moved"  # another firer advanced it first: nothing written
    ADVANCED = "advanced"


@dataclass(frozen=True, slots=True)
class ScheduleAdvance(ScriptCall):
    """schedule_advance.lua: a claimed schedule's firings recorded and its next firing set, if its
    nextFire is still ``read`` (no other firer advanced it)."""

    SCRIPT = "schedule_advance"
    KEY_NAMES = ("schedule", "due", "due_tenants")
    VERDICT = ScheduleAdvanceVerdict

    schedule_key: str
    read: str  # the nextFire the firer read
    next_fire: str  # '0' = none: it ended
    made: int  # runs made
    skipped: int  # firings skipped
    last_fire: str  # '' = keep
    last_run: str  # '' = keep
    last_error: str  # '' = keep, '-' = clear
    tenant: str
    held: str  # why its tenant's firings are held, '' = not held
    due_at: str  # when it is looked at again, '' = at its next firing

    def keys(self, part: Partition) -> list[str]:
        return [part.schedule(self.schedule_key), part.schedules_due(self.tenant), part.schedules_due_tenants]
