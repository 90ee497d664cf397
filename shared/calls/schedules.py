"""Calls of a tenant's schedule scripts (producer/schedules/store.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = ["ScheduleDelete", "ScheduleDeleteVerdict", "SchedulePause", "SchedulePauseVerdict"]


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
