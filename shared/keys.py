"""Every Redis key agentmill touches, built in one place.

All keys of one run carry the hash tag ``{runId}`` so they live in one Redis Cluster slot and one
Lua script may touch them together. Cross-run keys (the live index, arq's queue) are few and named
here too. arq's own key layout is mirrored from arq.constants so the enqueue script can write it.
"""

from __future__ import annotations

import hashlib

from arq.constants import (
    default_queue_name,
    in_progress_key_prefix,
    job_key_prefix,
)

__all__ = [
    "AWAITING",
    "BATCH_DELIVERY",
    "INDEX_DIMS",
    "LIVE",
    "PREFIX",
    "QUEUE",
    "WEBHOOKS",
    "WEBHOOKS_DUE",
    "WORKERS",
    "arq_in_progress_key",
    "arq_job_key",
    "batch_key",
    "endpoint_hash",
    "events_stream",
    "index_key",
    "job_id",
    "parse_job_id",
    "provider_pause_key",
    "provider_requests_key",
    "provider_slots_key",
    "provider_tokens_key",
    "run_key",
    "session_history_key",
    "session_key",
    "session_queue_key",
    "session_runs_key",
    "session_tool_results_key",
    "tenant_active_key",
    "tenant_rate_key",
    "tenant_running_key",
    "tools_key",
    "webhook_key",
    "worker_inbox_key",
    "worker_runs_key",
]

PREFIX = "am"
QUEUE = default_queue_name  # arq's sorted set of pending job ids
LIVE = f"{PREFIX}:live"  # zset runId -> when the reconciler should next look at it (ms)
AWAITING = f"{PREFIX}:awaiting"  # zset runId -> since when it waits for a human decision (ms)
WORKERS = f"{PREFIX}:workers"  # zset worker lease id -> when its lease expires (ms, Redis time)
WEBHOOKS = f"{PREFIX}:webhooks"  # list of runIds whose terminal result awaits webhook delivery
WEBHOOKS_DUE = f"{PREFIX}:webhooks:due"  # zset runId -> next delivery attempt (ms)


def run_key(run_id: str) -> str:
    """Hash: status, epoch, gen, lastSeq, input, ckpt, result, owner (a worker lease id), tenant, …"""
    return f"{PREFIX}:{{{run_id}}}:run"


def events_stream(run_id: str) -> str:
    """Stream of RunEvents; entry id ``<seq>-0``, fields seq, kind, ts, payload (JSON), epoch (the writer's)."""
    return f"{PREFIX}:{{{run_id}}}:events"


def tools_key(run_id: str) -> str:
    """Hash toolCallId -> JSON record {state: pending|done, epoch, attempts, result}."""
    return f"{PREFIX}:{{{run_id}}}:tools"


def session_key(session_id: str) -> str:
    """Hash: tenant, createdAt, activeRun."""
    return f"{PREFIX}:s:{{{session_id}}}"


def session_history_key(session_id: str) -> str:
    """List of finished run loops (JSON), oldest first."""
    return f"{PREFIX}:s:{{{session_id}}}:loops"


def session_tool_results_key(session_id: str) -> str:
    """Hash toolCallId -> tool result JSON, for recall_tool_call."""
    return f"{PREFIX}:s:{{{session_id}}}:toolresults"


def session_queue_key(session_id: str) -> str:
    """List of runIds waiting for the session's active run to finish."""
    return f"{PREFIX}:s:{{{session_id}}}:pending"


def session_runs_key(session_id: str) -> str:
    """List of every runId of the session, in submission order."""
    return f"{PREFIX}:s:{{{session_id}}}:runs"


def tenant_active_key(tenant: str) -> str:
    """Zset runId -> submitted at (ms): the tenant's runs counted against its maxActive quota."""
    return f"{PREFIX}:tenant:{tenant}:active"


def tenant_running_key(tenant: str) -> str:
    """Zset runId -> claimed at (ms): the tenant's runs counted against its maxRunning quota."""
    return f"{PREFIX}:tenant:{tenant}:running"


def tenant_rate_key(tenant: str, second: int) -> str:
    """Counter of the runs the tenant submitted in one second (expires after two)."""
    return f"{PREFIX}:tenant:{tenant}:rate:{second}"


def worker_runs_key(lease_id: str) -> str:
    """Set of the runIds a worker (one lease id) holds: what the reconciler re-dispatches when it dies."""
    return f"{PREFIX}:w:{{{lease_id}}}:runs"


def worker_inbox_key(lease_id: str) -> str:
    """List of runIds with an abort request for this worker, read by its heartbeat (bounded)."""
    return f"{PREFIX}:w:{{{lease_id}}}:inbox"


def webhook_key(run_id: str) -> str:
    return f"{PREFIX}:{{{run_id}}}:webhook"


def endpoint_hash(base_url: str) -> str:
    """A model endpoint's id in limiter keys: the hash of its base URL (no secrets, bounded length)."""
    return hashlib.sha256(base_url.rstrip("/").lower().encode()).hexdigest()[:16]


def provider_slots_key(endpoint: str) -> str:
    """Zset holder -> expiry (ms): the calls in flight to one endpoint; a dead holder's entry expires."""
    return f"{PREFIX}:p:{{{endpoint}}}:slots"


def provider_requests_key(endpoint: str) -> str:
    """Zset holder -> start (ms): the requests of the sliding window (requestsPerMinute)."""
    return f"{PREFIX}:p:{{{endpoint}}}:requests"


def provider_tokens_key(endpoint: str) -> str:
    """Zset "holder:tokens" -> start (ms): the tokens of the sliding window (tokensPerMinute)."""
    return f"{PREFIX}:p:{{{endpoint}}}:tokens"


def provider_pause_key(endpoint: str) -> str:
    """String: until when (ms) no call may start, set from a 429's Retry-After; expires by itself."""
    return f"{PREFIX}:p:{{{endpoint}}}:pause"


def job_id(run_id: str, gen: int) -> str:
    """arq job id of a run's dispatch number ``gen``: the run id itself first, then ``runId#gen``."""
    return run_id if gen <= 1 else f"{run_id}#{gen}"


def parse_job_id(job: str) -> tuple[str, int]:
    """(run id, dispatch number) of an arq job id written by ``job_id`` (run ids have no ``#``)."""
    run_id, sep, gen = job.rpartition("#")
    if sep and gen.isdigit():
        return run_id, int(gen)
    return job, 1


def arq_job_key(job: str) -> str:
    return job_key_prefix + job


def arq_in_progress_key(job: str) -> str:
    return in_progress_key_prefix + job


# ---- listing indexes and batches (per tenant; bounded, expiring with the retention) ----
# Every index is a sorted set runId -> createdAt (ms), written by the scripts that create runs or
# change their status. ``dim`` is one of INDEX_DIMS; the tenant-wide index is dim "all", value "".
INDEX_DIMS = ("all", "status", "agent", "session", "batch", "meta")


def index_key(tenant: str, dim: str, value: str = "") -> str:
    return f"{PREFIX}:t:{tenant}:ix:{dim}:{value}"


def batch_key(tenant: str, batch_id: str) -> str:
    """Hash: createdAt, total, done, one counter per status, finishedAt, webhook, result."""
    return f"{PREFIX}:t:{tenant}:batch:{batch_id}"


# A finished batch's webhook delivery id on keys.WEBHOOKS: this prefix, then its batch_key (a runId
# never holds a brace, so the two kinds of delivery cannot be confused).
BATCH_DELIVERY = "{batch}"
