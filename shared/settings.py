"""Process configuration from the environment. Every variable is listed in the README."""

from __future__ import annotations

from functools import lru_cache

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared import limits

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    redis_url: str = Field(default="redis://127.0.0.1:6379/0", validation_alias="REDIS_URL")
    redis_sentinels: str | None = None  # "host:port,host:port"; REDIS_URL then names db and password
    redis_sentinel_master: str = "mymaster"
    redis_cluster: bool = False  # REDIS_URL names any node of a Redis Cluster
    # Replicas a worker's writes wait for (WAIT) before it acts on them: default 1 on a cluster, else 0.
    redis_wait_replicas: int | None = None
    partitions: int | None = None  # partitions of the run key space; default 16 on a cluster, 1 on one Redis
    profiles: str | None = None  # path of a JSON file of agent profiles
    dev_profiles: bool = False  # load test-only profiles and tools (scripted, echo, sleep, fail, flaky)
    run_duration_default_ms: int = 3_600_000  # maxRunDurationMs when neither run nor profile sets one
    run_duration_max_ms: int = 24 * 3_600_000  # no run lasts longer, whatever its profile or input says

    # worker
    max_jobs: int = 500  # concurrent runs per worker process
    poll_delay_s: float = 0.05  # arq queue poll interval; small so an idle pool starts a run at once
    claim_batch: int = 64  # most jobs one poll claims, so a burst spreads over the workers
    lease_ms: int = 30_000  # a run whose worker stops renewing is re-dispatched after this
    heartbeat_ms: int = 500  # lease renewal and abort checks, one pipelined round trip per worker
    reconcile_ms: int = 2_000  # how often each worker sweeps for runs that lost their worker
    max_run_crashes: int = Field(
        default=3, ge=1
    )  # a run that lost its worker this often ends failed (poison_run)
    # SIGTERM: time for the tool and model calls in flight to finish and record before the runs are
    # handed back (what is still running then is cancelled, and re-executed by whoever resumes it)
    drain_timeout_s: float = Field(
        default=20.0, validation_alias=AliasChoices("AGENTMILL_DRAIN_TIMEOUT_S", "AGENTMILL_SHUTDOWN_GRACE_S")
    )
    queued_check_ms: int = 60_000  # a queued run with no arq job after this is re-enqueued
    worker_metrics_port: int = 9100  # /metrics and /healthz; 0 = an ephemeral port, -1 = off
    worker_metrics_host: str = "0.0.0.0"  # where the worker's /metrics and /healthz listen
    worker_id: str | None = None
    delta_flush_ms: int = 50  # model_delta coalescing: at most one event per run per this interval
    delta_flush_chars: int = 2_000
    provider_slot_lease_ms: int = 15_000  # a maxConcurrent slot whose worker died frees after this

    # retention
    stream_maxlen: int = 10_000
    retention_s: int = 7 * 24 * 3600  # streams and results of finished runs expire after this

    # api
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_tokens: str | None = None  # "token=tenant,token2=tenant2"
    api_tokens_file: str | None = None
    # Tenants whose tokens may read the pool as a whole (GET /v1/pool, the console's pool page):
    # workers, queues, every tenant's run counts. "a,b"; with auth disabled the open tenant may.
    operator_tenants: str = ""
    api_metrics_port: int = (
        -1
    )  # -1: /metrics on the API port; else its own listener (0: ephemeral), API port 404
    metrics_token: str | None = None  # set: the API's /metrics wants "Authorization: Bearer <it>"
    auth_disabled: bool = False
    max_body_bytes: int = 2_000_000
    max_batch: int = limits.MAX_BATCH_ITEMS  # items per batch request (Submitter.check_batch_size)
    max_queue_depth: int = 100_000  # above this, submissions get 429
    tenant_max_active: int = 10_000  # queued + running runs per tenant; beyond, submissions get 429
    tenant_max_running: int = 100  # runs of one tenant running at once (claim time); 0 = no limit
    tenant_submits_per_second: int = 1_000  # runs a tenant may submit per second (a batch counts each)
    # Most runs a tenant may submit at once (token bucket size); 0 = submits_per_second + max_batch.
    # Never below max_batch: a full batch request always fits.
    tenant_submit_burst: int = 0
    tenant_quotas: str | None = (
        None  # JSON (or a file of it): {"tenant": {"maxActive", "maxRunning", "submitsPerSecond", "submitBurst"}}
    )
    max_streams_per_tenant: int = 100  # open SSE streams + long-polls of one tenant per API process
    max_streams: int = 1_000  # … of all tenants per API process; beyond either, 429
    redis_timeout_s: float = (
        5.0  # socket timeout of every Redis call from the API (blocking reads: + their block)
    )
    header_timeout_s: float = 10.0  # a connection whose request headers take longer is closed
    body_timeout_s: float = 30.0  # a request body that takes longer to arrive gets 408
    # HMAC key of the ids a named tenant's runs and sessions are kept under (producer.submission.Scope);
    # unset: a public development key. Set it once: another key loses every stored run of a named tenant.
    id_secret: str | None = None
    webhook_secret: str | None = None  # HMAC-SHA256 key for X-Agentmill-Signature
    webhook_allow_hosts: str = ""  # comma-separated hosts exempt from the private-address guard
    webhook_max_attempts: int = 8

    # cli: where `agentmill submit` journals the parts of a batch it sent (to resume it);
    # empty = $XDG_STATE_HOME/agentmill, else ~/.local/state/agentmill
    cli_state_dir: str = ""

    log_json: bool = False
    log_level: str = "INFO"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
