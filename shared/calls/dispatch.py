"""Calls that hand a partition's runs to workers: a worker's batched job start (arq_worker), the
reconciler's check of a run it found overdue (worker/process/reconciler.py); and the reading of
the partition's work that scales the pool (producer/gauges.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.calls.base import ScriptCall
from shared.keys import Partition

__all__ = ["ClaimJobs", "Redispatch", "RedispatchReason", "RedispatchVerdict", "Scaling"]


@dataclass(frozen=True, slots=True)
class ClaimJobs(ScriptCall):
    """claim_jobs.lua: the partition's due scheduled jobs moved to the queue, then up to ``limit`` of
    ``job_ids`` (none: of the queue's due jobs, the tenants taking turns) claimed with arq's rule and
    each one's run taken by the worker ``lease_id`` at once; answers per claimed job, in the order
    the worker starts them, its id, its queue score and what acquire_run answered ({} with no
    lease id)."""

    SCRIPT = "claim_jobs"
    KEY_NAMES = ()  # the partition's queue, live index, scheduled jobs and depth counters

    now_ms: int  # 0: the server's clock when it runs (a claim sent behind a wake wait)
    in_progress_ms: int  # the in-progress key's ttl
    limit: int  # most jobs to claim
    in_progress_prefix: str  # arq's in-progress key prefix
    check_ms: int  # a claimed run's reconciler check, from now
    max_running: int  # the default maxRunning per tenant (0: none)
    running_caps: str  # {tenant: maxRunning} JSON, or ''
    lease_id: str  # the claiming worker's lease ('' = claim only)
    job_ids: tuple[bytes | str, ...]

    def keys(self, part: Partition) -> list[str]:
        return []


class RedispatchVerdict(StrEnum):
    MOVED = "moved"  # another gen, or no longer the dead worker's
    MISSING = "missing"  # no run hash: out of the live index
    ENDING_OWED = "ending_owed"  # ended, its ending still owed to its parent or children (the owed second)
    TERMINAL = "terminal"
    ALIVE = "alive"  # its worker's lease is live
    POISON_RUN = "poison_run"  # lost once too often: ended failed (its crashes second)
    UNHELD = "unheld"  # queued, held by its tenant's cap with none running: back on the queue
    WAITING = "waiting"  # queued, its job waiting
    NOT_DUE = "not_due"  # scheduled, its job not due yet
    MAX_RUN_DURATION = "max_run_duration"  # ended failed: its run deadline passed while parked
    APPROVAL_TIMEOUT = "approval_timeout"  # ended failed: no approval decision in time
    AWAITING = "awaiting"  # awaiting a human, its deadline watched
    AWAITING_TOOLS = "awaiting_tools"
    AWAITING_MODEL = "awaiting_model"
    AWAITING_CHILDREN = "awaiting_children"
    REDISPATCHED = "redispatched"  # (its RedispatchReason second)


class RedispatchReason(StrEnum):
    """Why a run was re-dispatched (the Lua's ``REASON.*``; the metrics count some by it)."""

    LEASE_EXPIRED = "lease_expired"  # running, its worker's lease expired
    JOB_LOST = "job_lost"  # queued or scheduled with no job to run it
    CLIENT_TOOLS_SETTLED = "client_tools_settled"  # its client tools all answered or timed out
    MODEL_REPLIED = "model_replied"  # its awaited economy reply is in (a missed wake-up)
    ECONOMY_DEADLINE = "economy_deadline"  # its economy call's deadline passed: the standard lane next
    CHILDREN_ENDED = "children_ended"  # its child runs all ended (a missed wake-up)


@dataclass(frozen=True, slots=True)
class Redispatch(ScriptCall):
    """redispatch.lua: the reconciler's check of a run whose live-index deadline passed (or, with
    ``dead_worker``, of a run that worker's expired lease still names): re-dispatched as ``gen`` + 1
    when its job or its worker was lost."""

    SCRIPT = "redispatch"
    KEY_NAMES = ("run", "stream", "tools", "job", "in_progress", "next_job")
    VERDICT = RedispatchVerdict

    run_id: str
    gen: int  # the gen the reconciler read
    job_id: str  # its job of that gen
    dead_worker: str  # a dead worker's lease id ('' = from the live index)

    def keys(self, part: Partition) -> list[str]:
        return [*part.run_keys(self.run_id), part.job_key(self.job_id), part.in_progress_key(self.job_id),
                part.job_key(part.job_id(self.run_id, self.gen + 1))]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Scaling(ScriptCall):
    """scaling.lua: the scaling signal's reading of the partition (read-only, producer/gauges.py):
    {queued jobs, running runs, awaiting approval, scheduled, queued of each priority from the
    lowest, then queued and running of each of ``tenants``}."""

    SCRIPT = "scaling"
    KEY_NAMES = ()  # the partition's fixed keys

    tenants: tuple[str, ...]

    def keys(self, part: Partition) -> list[str]:
        return []
