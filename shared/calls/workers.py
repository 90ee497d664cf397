"""Calls about a worker's lease on a partition (worker/adapters/redis_store.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = ["ForgetWorker", "ForgetWorkerVerdict"]


class ForgetWorkerVerdict(StrEnum):
    ALIVE = "alive"  # only_if_expired, and its lease is still there
    HAS_RUNS = "has_runs"  # the lease ended; its entry stays, expired, until its runs are handed on
    GONE = "gone"  # no entry (already forgotten here)
    FORGOTTEN = "forgotten"


@dataclass(frozen=True, slots=True)
class ForgetWorker(ScriptCall):
    """forget_worker.lua: a worker gives up its lease on a partition, or the reconciler forgets a
    dead one; the entry, runs set and inbox go once the runs set is empty."""

    SCRIPT = "forget_worker"
    KEY_NAMES = ("runs", "inbox", "lease", "answer_workers")
    VERDICT = ForgetWorkerVerdict

    lease_id: str
    only_if_expired: str  # '1': the reconciler's check, forget only a lease that lapsed

    def keys(self, part: Partition) -> list[str]:
        return [
            part.worker_runs(self.lease_id),
            part.worker_inbox(self.lease_id),
            part.worker_lease(self.lease_id),
            part.answer_workers,
        ]
