"""``python -m worker``: one worker process (the same as ``agentmill worker``)."""

from __future__ import annotations

import sys

from shared import logs, loop
from shared.settings import SettingsError, get_settings
from worker.jobs import WorkerProcess


def main() -> None:
    try:
        settings = get_settings()
    except SettingsError as exc:  # one line and exit code 2, as `agentmill worker` says it
        print(f"agentmill worker: {exc}", file=sys.stderr)
        sys.exit(2)
    proc = WorkerProcess(settings)
    logs.configure(json_lines=settings.log_json, level=settings.log_level, workerId=proc.worker_id)
    loop.run(proc.run())


if __name__ == "__main__":
    main()
