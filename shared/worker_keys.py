"""A worker's keys on a partition (shared/keys.py's ``Partition`` has them): the runs it holds there,
its abort inbox, its lease key, and the partition's zsets of live workers. A worker holds a lease on
every partition (worker/process/lease_keeping.py)."""

from __future__ import annotations

__all__ = ["WorkerKeys"]


class WorkerKeys:
    """The worker keys of one partition (declared by ``_worker_prefixes``)."""

    def _worker_prefixes(self, b: str) -> None:
        self.worker_runs_prefix = b + "w.runs:"  # set of the runIds a worker (lease id) holds here
        self.worker_inbox_prefix = b + "w.inbox:"  # list of runIds with an abort request (bounded)
        self.worker_lease_prefix = b + "w.lease:"  # string, expiring with the worker's lease here
        self.workers = b + "workers"  # zset worker lease id -> lease expiry (ms, Redis time)
        # zset as ``workers``, of the workers whose runs leave out the event an answer wrote
        # (shared.fields.RunField.ANSWERED): beat.lua adds to both, forget_worker.lua takes from both;
        # a worker of an earlier release adds to ``workers`` only (prelude.lua answer_event)
        self.answer_workers = b + "workers.ans"

    def worker_runs(self, lease_id: str) -> str:
        return self.worker_runs_prefix + lease_id

    def worker_inbox(self, lease_id: str) -> str:
        return self.worker_inbox_prefix + lease_id

    def worker_lease(self, lease_id: str) -> str:
        """Exists while the worker's lease is unexpired (PX: Redis's clock decides): what a commit
        checks in one command. ``workers`` holds the same expiry, for the sweep to find it."""
        return self.worker_lease_prefix + lease_id
