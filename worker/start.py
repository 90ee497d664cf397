"""How ``agentmill worker`` starts: its start-up checks once, then one worker process in this
process (``--processes 1``, what a pod runs) or a supervisor of several (worker/supervisor.py)."""

from __future__ import annotations

import os

from shared import logs, loop
from shared.preflight import check_worker
from shared.settings import Settings
from shared.tenants import require_id_secret

__all__ = ["processes_for", "start_worker"]


def processes_for(settings: Settings, requested: int | None) -> int:
    """``--processes``, else ``AGENTMILL_WORKER_PROCESSES``, else one per core."""
    return requested or settings.worker_processes or os.cpu_count() or 1


def start_worker(settings: Settings, processes: int = 1) -> None:
    """Runs until stopped; a refused start raises SettingsError first (before any process starts:
    the caller prints its one line and exits 2)."""
    require_id_secret(settings)
    profiles = check_worker(settings)
    if processes == 1:
        from worker.jobs import WorkerProcess

        proc = WorkerProcess(settings, profiles=profiles)
        logs.configure(json_lines=settings.log_json, level=settings.log_level, workerId=proc.worker_id)
        loop.run(proc.run())
        return
    from worker.supervisor import Supervisor

    logs.configure(json_lines=settings.log_json, level=settings.log_level, process="worker-supervisor")
    loop.run(Supervisor(settings, processes).run())
