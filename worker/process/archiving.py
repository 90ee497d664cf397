"""A worker's archiver task (AGENTMILL_ARCHIVE_URL): shared.archive's Archiver on the worker's
partitions, its backlog and writes on the worker's /metrics. Owned by the worker process
(worker/process/jobs.py), which cancels and awaits it on shutdown; the store's connections close with it."""

from __future__ import annotations

import functools
import logging

from shared.archive.archiver import Archiver
from shared.archive.store import ArchiveStore
from worker.process import failpoints
from worker.process.deps import WorkerDeps
from worker.telemetry.metrics import MetricsObserver

__all__ = ["archive_forever"]

log = logging.getLogger("agentmill.archive")


async def archive_forever(deps: WorkerDeps, metrics: MetricsObserver) -> None:
    s = deps.settings
    assert s.archive_url
    store = ArchiveStore(s.archive_url)
    metrics.archive_backlog_limit.set(s.archive_backlog_alert)
    over = False

    def backlog(n: int) -> None:
        nonlocal over
        metrics.archive_backlog.set(n)
        if (n > s.archive_backlog_alert) != over:
            over = not over
            log.log(logging.ERROR if over else logging.INFO,
                    "archive: %d finished runs wait for the archive (alert above %d)", n, s.archive_backlog_alert)  # fmt: skip

    archiver = Archiver(
        deps.parts, deps.scripts, s, store,
        on_backlog=backlog, on_archived=metrics.archived.inc,
        after_write=functools.partial(failpoints.hit, "after_archive_write"),
    )  # fmt: skip
    try:
        await archiver.run_forever()
    finally:
        await store.aclose()
