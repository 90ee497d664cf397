"""Deletion's settings (docs/operations.md#deletion): how long a deleted run's tombstone is kept and
how much a deletion by metadata does a step. ``Settings`` (shared/settings.py) holds them with the
rest."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["DeletionSettings"]


class DeletionSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    tombstone_retention_s: int = Field(
        default=30 * 86_400,
        ge=60,
        description="how long a deleted run's tombstone (its id, tenant, time and actor) is kept: while it is, "
        "nothing writes the run again (a worker still holding it, the archiver, a webhook retry, a schedule "
        "firing, a resubmission of its id); keep it longer than any of those can lag",
    )
    deletion_step: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="runs a deletion by metadata deletes in one step (one claim by one worker) before it "
        "lets the others' work through",
    )
    deletion_pause_ms: int = Field(
        default=20,
        ge=0,
        description="a deleter's pause between two steps of a deletion by metadata",
    )
    deletion_lock_timeout_ms: int = Field(
        default=2000,
        ge=1,
        description="how long a deletion waits for a deleted run's archive rows while another transaction "
        "(an archiver's write) holds them: past it the request answers, and the workers' deleters delete "
        "those rows in the background (archivePending)",
    )
