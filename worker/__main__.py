"""``python -m worker``: one worker process (the same as ``agentmill worker``)."""

from __future__ import annotations

from shared import logs, loop
from shared.preflight import check_worker
from shared.settings import get_settings
from shared.settings_errors import exit_on_refusal
from shared.tenants import require_id_secret
from worker.jobs import WorkerProcess


def main() -> None:
    with exit_on_refusal("agentmill worker"):  # one line and exit code 2, as `agentmill worker` says it
        settings = get_settings()
        require_id_secret(settings)
        profiles = check_worker(settings)
    proc = WorkerProcess(settings, profiles=profiles)
    logs.configure(json_lines=settings.log_json, level=settings.log_level, workerId=proc.worker_id)
    loop.run(proc.run())


if __name__ == "__main__":
    main()
