"""The baseline: a bare arq worker with a no-op job (and one that sleeps 1 s, for figure 4), with the
same serializer, max_jobs and poll delay."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from arq.connections import RedisSettings

from shared.dispatch import deserialize, serialize

ARQ_UP = "bench:arq:up"  # how many of these workers have started (bench figure 4m waits for them)


async def started(ctx: dict[str, Any]) -> None:
    await ctx["redis"].incr(ARQ_UP)


async def noop(ctx: dict[str, Any], *args: Any) -> None:
    return None


async def sleep1(ctx: dict[str, Any], *args: Any) -> None:
    await asyncio.sleep(1.0)


class WorkerSettings:
    functions = [noop, sleep1]
    on_startup = started
    redis_settings = RedisSettings.from_dsn(
        os.environ.get("REDIS_URL", "redis://localhost:6379")
    )  # the bench sets it
    max_jobs = int(os.environ.get("AGENTMILL_MAX_JOBS", "500"))
    poll_delay = float(os.environ.get("AGENTMILL_POLL_DELAY_S", "0.05"))
    job_serializer = serialize
    job_deserializer = deserialize
    keep_result = 60
    handle_signals = True
