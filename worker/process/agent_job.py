"""The job function arq runs for a dispatch of a run: the run's driver, from the job's context."""

from __future__ import annotations

from typing import Any

from worker.process.deps import WorkerDeps
from worker.runner import RunDriver

__all__ = ["JOB_TIMEOUT_S", "run_agent"]

JOB_TIMEOUT_S = 8 * 24 * 3600  # beyond the longest allowed run; runs end themselves by maxRunDurationMs


async def run_agent(ctx: dict[str, Any], run_id: str, gen: int) -> str:
    deps: WorkerDeps = ctx["deps"]
    part = ctx.get("partition") or deps.parts.layout.of_job(ctx["job_id"])[0]
    ports = deps.ports(part, run_id, ctx.get("acquired"))
    ports.job_end = ctx.get("job_end")  # the claimed job's finish, for the run's ending commit
    job_try = int(ctx.get("job_try", 1))
    return await RunDriver(deps, ports, run_id, int(gen), job_try=job_try).run(deps.active)
