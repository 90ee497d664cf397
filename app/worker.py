"""A worker process as ``agentmill worker`` starts it (``python -m app.worker``: one process, as a pod
runs, or a process of ``--processes N``): its start-up checks once, then one worker process in this
process or a supervisor of several (app/supervisor.py). The worker process gets its side loops
here: the schedules' firing loop, which submits runs as the producer does, the deletions by
metadata, which delete as the API does, and the economy lane's batchers."""

from __future__ import annotations

import functools
import os
from typing import Any

from prometheus_client import CollectorRegistry

from shared import logs, loop
from shared.partitions import Partitions
from shared.preflight import check_worker
from shared.profiles import AgentProfile
from shared.settings import Settings, get_settings
from shared.settings_errors import exit_on_refusal
from shared.tenants import require_id_secret
from worker.process import failpoints
from worker.process.jobs import SideLoop, WorkerProcess
from worker.telemetry.observer import Observer

__all__ = ["main", "processes_for", "start_worker", "worker_process"]


def processes_for(settings: Settings, requested: int | None) -> int:
    """``--processes``, else ``AGENTMILL_WORKER_PROCESSES``, else one per core."""
    return requested or settings.worker_processes or os.cpu_count() or 1


async def _fire_schedules(
    parts: Partitions[Any], settings: Settings, profiles: dict[str, AgentProfile], registry: CollectorRegistry
) -> None:
    """The schedules' firing loop; failpoint after_schedule_fire: after a firing's run."""
    from producer.schedules.firer import fire_forever  # imported by worker_process, off the loop

    hit = functools.partial(failpoints.hit, "after_schedule_fire")
    await fire_forever(parts, settings, profiles, hit, registry)


async def _send_batches(
    parts: Partitions[Any], settings: Settings, profiles: dict[str, AgentProfile], registry: CollectorRegistry
) -> None:
    """The economy lane's batchers (worker/economy/loop.py); failpoints economy_after_*."""
    from worker.economy.loop import run_batchers

    await run_batchers(parts, settings, profiles, failpoints.hit, registry)


async def _delete_by_metadata(
    parts: Partitions[Any], settings: Settings, profiles: dict[str, AgentProfile], registry: CollectorRegistry
) -> None:
    """Deletions by metadata (POST /v1/deletions), a step at a time, in every worker."""
    from producer.deletion_jobs import delete_forever

    await delete_forever(parts, settings)


def worker_process(
    settings: Settings | None = None,
    *,
    profiles: dict[str, AgentProfile] | None = None,
    observer: Observer | None = None,
    burst: bool = False,
) -> WorkerProcess:
    """A worker process with the loops the settings ask for beside its own."""
    s = settings or get_settings()
    sides: list[SideLoop] = [_delete_by_metadata]
    if s.schedules:  # croniter, dateutil and the producer: 150 ms of imports, now rather than on the loop
        import producer.schedules.firer  # noqa: F401

        sides.append(_fire_schedules)
    if s.economy_batcher:
        sides.append(_send_batches)
    return WorkerProcess(s, profiles=profiles, observer=observer, burst=burst, side_loops=sides)


def start_worker(settings: Settings, processes: int = 1) -> None:
    """Runs until stopped; a refused start raises SettingsError first (before any process starts:
    the caller prints its one line and exits 2)."""
    require_id_secret(settings)
    profiles = check_worker(settings)
    if processes == 1:
        proc = worker_process(settings, profiles=profiles)
        logs.configure(json_lines=settings.log_json, level=settings.log_level, workerId=proc.worker_id)
        loop.run(proc.run())
        return
    from app.supervisor import Supervisor

    logs.configure(json_lines=settings.log_json, level=settings.log_level, process="worker-supervisor")
    loop.run(Supervisor(settings, processes).run())


def main() -> None:
    with exit_on_refusal("agentmill worker"):  # one line and exit code 2, as `agentmill worker` says it
        start_worker(get_settings(), processes=1)


if __name__ == "__main__":
    main()
