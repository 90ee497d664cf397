"""The history archive's settings (docs/operations.md#archive): where finished runs go in PostgreSQL,
who writes them there, and how long Redis and the archive keep them. ``Settings`` (shared/settings.py)
holds them with the rest."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ArchiveSettings"]


class ArchiveSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    archive_url: str | None = Field(
        default=None,
        description="`postgresql://…`: finished runs are archived there (record, input, result, events, tool "
        "records) and dropped from Redis `AGENTMILL_LIVE_RETENTION_S` later; the API reads them from either. "
        "Unset: no archive, finished runs stay in Redis for `AGENTMILL_RETENTION_S`",
    )
    worker_archiver: bool = Field(
        default=True,
        description="with the archive on: each worker runs an archiver task; `false` leaves it to "
        "`agentmill archiver` processes",
    )
    live_retention_s: int = Field(
        default=3600,
        ge=0,
        description="with the archive on: how long an archived run stays in Redis (its stream and tool "
        "records leave at once)",
    )
    archive_batch: int = Field(
        default=200, ge=1, description="runs one archiver claims and writes in one transaction"
    )
    archive_poll_ms: int = Field(
        default=500, ge=10, description="how often an archiver with nothing to do looks for finished runs"
    )
    archive_lease_ms: int = Field(
        default=60_000,
        ge=1_000,
        description="an archiver's claim on a batch; a batch whose archiver died is claimed again after this",
    )
    archive_backlog_alert: int = Field(
        default=100_000,
        description="finished runs waiting for the archive above which `agentmill_archive_backlog` alerts "
        "(the documented alert rule); Redis keeps them until archived",
    )
    archive_retention_days: int = Field(
        default=0,
        ge=0,
        description="archived runs finished longer ago are deleted by the archivers (a delete job, in "
        "small batches); `0` keeps them forever",
    )
