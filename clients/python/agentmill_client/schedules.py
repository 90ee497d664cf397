"""Schedules on the wire: what ``POST /v1/schedules`` takes (ScheduleInput) and what the schedule
calls answer (ScheduleView, SchedulesPage). Attributes are snake_case, the JSON camelCase
(base.Model, base.Answer)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from agentmill_client.base import Answer, Model

__all__ = [
    "MAX_CATCHUP",
    "SCHEDULE_ID_PATTERN",
    "Overlap",
    "ScheduleAnswer",
    "ScheduleInput",
    "ScheduleView",
    "SchedulesPage",
]

# A schedule's runs are named ``<scheduleId>:<firing, UTC, YYYYmmddTHHMMSSZ>``: a run id's pattern
# (agentmill_client.ids.ID_PATTERN) less the colon and 28 characters.
SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
MAX_CATCHUP = 1000


class Overlap(StrEnum):
    """What a firing does while the schedule's previous run is still active."""

    SKIP = "skip"  # makes no run (counted in skipped)
    ENQUEUE = "enqueue"  # makes its run anyway
    CANCEL_PREVIOUS = "cancel_previous"  # aborts the previous run, then makes its own


class ScheduleInput(Model):
    """``POST /v1/schedules``."""

    schedule_id: str | None = Field(
        default=None,
        pattern=SCHEDULE_ID_PATTERN,
        description="names the schedule (generated when absent); creating the same definition again "
        "under it changes nothing, another definition is 409",
    )
    cron: str = Field(
        max_length=200,
        description="five fields (minute hour day-of-month month day-of-week) or six, seconds first",
    )
    timezone: str = Field(default="UTC", max_length=64, description="IANA time zone the cron is read in")
    input: dict[str, Any] = Field(
        description="the RunInput of every run it makes (without runId: each firing names its run)"
    )
    overlap: Overlap = Field(
        default=Overlap.SKIP,
        description="while the previous firing's run is active: skip this firing, enqueue anyway, or "
        "cancel_previous (abort it)",
    )
    catchup: int = Field(
        default=10,
        ge=1,
        le=MAX_CATCHUP,
        strict=True,
        description="after an outage, the missed firings are made, the latest `catchup` of them at most",
    )
    end_at: int | None = Field(
        default=None,
        ge=0,
        strict=True,
        description="no firing after this time (ms since the epoch); the schedule then stays, with no "
        "next firing, until deleted (it still counts towards its tenant's maxSchedules)",
    )


class ScheduleView(Answer):
    """A schedule as ``GET /v1/schedules/{id}`` shows it."""

    schedule_id: str
    cron: str
    timezone: str
    input: dict[str, Any]
    overlap: str
    catchup: int
    paused: bool = Field(description="no firing until resumed: paused by its tenant, or held (pausedReason)")
    paused_reason: str | None = Field(
        default=None,
        description="why it is paused: `paused` (its tenant paused it) or why its firings are held, "
        "beginning `token:` (its tenant named by no running API process's token), `disabled:` (its "
        "tenant's quota disables it) or `budget:` (its tenant's day budget is spent); held ones resume "
        "by themselves",
    )
    end_at: int | None = Field(default=None, description="no firing after this time (ms)")
    created_at: int
    next_fire_times: list[int] = Field(
        description="its next firings (ms since the epoch); empty while paused and once past its endAt"
    )
    last_fire_at: int | None = Field(default=None, description="its last firing made or skipped (ms)")
    last_run_id: str | None = Field(default=None, description="the last run it made")
    fired: int = Field(default=0, description="runs it made")
    skipped: int = Field(default=0, description="firings it skipped (overlap, past the catch-up, refused)")
    last_error: str | None = Field(default=None, description="why its last refused firing was refused")


class ScheduleAnswer(Answer):
    """The answer to pause, resume and delete."""

    schedule_id: str
    result: str = Field(description="paused | resumed | unchanged | deleted")


class SchedulesPage(Answer):
    schedules: list[ScheduleView]
    more: bool = Field(default=False, description="the tenant has more schedules than the limit")
