"""How a worker process runs its runs: how many at once, how it polls and claims jobs, its lease and
heartbeat, its sweeps, its shutdown, its metrics listener and its processes, how it paces deltas.
``Settings`` (shared/settings.py) holds it with the rest."""

from __future__ import annotations

from typing import Self

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["DEFAULT_HEARTBEAT_MS", "WorkerSettings"]

DEFAULT_HEARTBEAT_MS = 500


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    max_jobs: int = Field(default=500, description="concurrent runs per worker process")
    poll_delay_s: float = Field(
        default=0.05,
        description="arq queue poll interval: a busy worker polls this often; an idle one starts a new run "
        "as soon as its wake signal comes and polls every second interval besides (when its wait's time "
        "runs out on Redis's clock tick, up to 0.1 s later), so a run whose signal was lost waits about "
        "twice this long",
    )
    claim_batch: int = Field(
        default=64,
        description="jobs one poll claims, so a burst spreads over the workers; when more are due, half of "
        "them, up to four batches and half the worker's free room (a worker alone, by its last heartbeat, "
        "takes all that is due up to four batches); a claim that comes back full is followed at once by the "
        "next, sent while its jobs start",
    )
    lease_ms: int = Field(
        default=30_000,
        description="a worker that stops renewing its lease has its runs re-dispatched after this; it stops "
        "itself a margin earlier",
    )
    heartbeat_ms: int = Field(
        default=DEFAULT_HEARTBEAT_MS,
        gt=0,
        description="the worker's lease renewal and abort inbox: one O(1) script per beat, whatever its runs; "
        "under a third of the lease (unset: 500 ms, or a third of a shorter lease); a worker with no runs beats "
        "every four heartbeats, or every sixth of the lease when that is sooner (never more often than every "
        "heartbeat)",
    )
    reconcile_ms: int = Field(
        default=2_000, description="how often each worker sweeps for runs that lost their worker"
    )
    max_run_crashes: int = Field(
        default=3,
        ge=1,
        description="a run whose worker is lost (lease expired: crash, kill, OOM) this many times ends "
        "`failed` (`poison_run`); a graceful hand-back does not count",
    )
    drain_timeout_s: float = Field(
        default=20.0,
        validation_alias=AliasChoices("AGENTMILL_DRAIN_TIMEOUT_S", "AGENTMILL_SHUTDOWN_GRACE_S"),
        description="SIGTERM: time for the model and tool calls in flight to finish and record before the "
        "runs are handed back (what still runs then is cancelled, and re-executed by whoever resumes it)",
    )
    queued_check_ms: int = Field(
        default=60_000, description="a queued run with no arq job after this is re-enqueued"
    )
    priority_aging_ms: int = Field(
        default=30_000,
        ge=1,
        description="the aging quantum of run priorities: a run waiting this long gains one priority level "
        "over the runs submitted after it (a run of priority p is never overtaken by a run of priority q "
        "submitted more than (q - p) times this after it)",
    )
    worker_metrics_port: int = Field(
        default=9100,
        description="the worker's `/metrics`, `/healthz` and `/readyz`; `0` an ephemeral port, `-1` off",
    )
    worker_metrics_host: str = Field(
        default="0.0.0.0",
        description="where the worker's `/metrics`, `/healthz` and `/readyz` listen (`127.0.0.1` on a shared host)",
    )
    worker_id: str | None = Field(
        default=None,
        description="the worker id in logs and run ownership; unset: host-pid-random (with "
        "`AGENTMILL_WORKER_PROCESSES` above 1, each process adds `-<index>.<start>` to it: a restarted "
        "process is a new worker)",
    )
    worker_processes: int | None = Field(
        default=None,
        ge=1,
        description="`agentmill worker`'s worker processes (`--processes` overrides it): above 1, a "
        "supervisor starts them, restarts one that dies, drains them all on SIGTERM and serves their "
        "merged `/metrics`, `/healthz` and `/readyz` on the metrics port; unset: one per core; `1` "
        "in the container image (a pod is one process)",
    )
    worker_metrics_socket: str = Field(
        default="",
        description="a Unix socket the worker serves `/metrics`, `/healthz` and `/readyz` on instead of "
        "the metrics port (set by `agentmill worker --processes` for each process it supervises)",
    )
    delta_flush_ms: int = Field(
        default=50, description="`model_delta` coalescing: at most one event per run per this interval"
    )
    delta_flush_chars: int = Field(default=2_000, description="… or per this many characters")
    delta_flush_per_s: int = Field(
        default=2_000,
        ge=1,
        description="the delta flushes a second one worker aims for over all its streaming runs: with "
        "n runs streaming, each flushes every max(`AGENTMILL_DELTA_FLUSH_MS`, n / this) seconds "
        "(worker/core/delta_pace.py)",
    )
    provider_slot_lease_ms: int = Field(
        default=15_000,
        description="a provider's `maxConcurrent` slot held by a worker that died frees after this (live "
        "calls renew it every third of it)",
    )
    failpoints: str = Field(
        default="",
        description="chaos tests only: `point:probability,…` (e.g. `after_tool_effect:0.2`); at a named "
        "point the worker kills itself with SIGKILL (`worker/process/failpoints.py`)",
    )

    @model_validator(mode="after")
    def _beats_keep_the_lease(self) -> Self:
        """A worker counts its lease over a margin early (worker.process.jobs.lease_margin_ms): a beat that
        comes every half lease or later finds it over every time, and the worker drops its runs at
        each beat. Unset, the beat follows a short lease; set, it must fit."""
        third = self.lease_ms // 3
        if "heartbeat_ms" not in self.model_fields_set:
            if self.heartbeat_ms > third:
                self.heartbeat_ms = max(1, third)
        elif self.heartbeat_ms > third:
            raise ValueError(
                f"AGENTMILL_HEARTBEAT_MS={self.heartbeat_ms} must be at most a third of AGENTMILL_LEASE_MS="
                f"{self.lease_ms} ({third}): a worker renews its lease once a beat and counts it over a "
                "margin early, so longer beats lose it between them"
            )
        return self
