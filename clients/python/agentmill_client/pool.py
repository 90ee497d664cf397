"""``GET /v1/pool``'s answer, for operators: the pool's workers and their leases, each partition's
queue and running runs, and the runs started and ended minute by minute over the last hour.
Attributes snake_case, the JSON camelCase."""

from __future__ import annotations

from pydantic import Field

from agentmill_client.base import Answer

__all__ = ["PoolAnswer", "PoolMinute", "PoolPartition", "PoolWorker"]


class PoolWorker(Answer):
    lease_id: str
    runs: int = Field(description="runs it holds now")
    lease_age_ms: int = Field(
        description="since it last renewed its lease (beats every AGENTMILL_HEARTBEAT_MS)"
    )
    expires_in_ms: int = Field(description="until its lease runs out unless renewed")


class PoolPartition(Answer):
    index: int
    queued: int = Field(description="jobs in the partition's queue (due or scheduled)")
    running: int = Field(description="runs the listed workers hold on it")
    awaiting_human: int


class PoolMinute(Answer):
    minute: int = Field(description="the minute's start (epoch ms)")
    started: int = Field(description="new runs started (resumes not counted)")
    completed: int
    failed: int
    aborted: int


class PoolAnswer(Answer):
    now: int
    lease_ms: int
    workers: list[PoolWorker]
    partitions: list[PoolPartition]
    minutes: list[PoolMinute] = Field(description="the last hour, oldest first; the current minute last")
    last_hour: dict[str, int] = Field(description="the minutes' sums")
