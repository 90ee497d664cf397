"""Process configuration from the environment: the only reader of ``AGENTMILL_*`` (and ``REDIS_URL``).

Every field carries its description; docs/settings.md is generated from them
(``python -m shared.settings_doc > docs/settings.md``; a unit test fails when it is stale, or when a
field has no description).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import SettingsConfigDict

from agentmill_client import limits
from shared.settings_agents import AgentSettings
from shared.settings_archive import ArchiveSettings
from shared.settings_deletion import DeletionSettings
from shared.settings_economy import EconomySettings
from shared.settings_errors import SettingsError, describe
from shared.settings_keys import KeySettings
from shared.settings_quotas import TenantQuotaSettings
from shared.settings_runner import RunnerSettings
from shared.settings_worker import WorkerSettings

__all__ = ["Settings", "SettingsError", "get_settings"]

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class Settings(
    WorkerSettings,
    TenantQuotaSettings,
    ArchiveSettings,
    KeySettings,
    DeletionSettings,
    AgentSettings,
    EconomySettings,
    RunnerSettings,
):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    # redis and the run key space
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias="REDIS_URL",
        description="the Redis to use; password and TLS (`rediss://`) go here",
    )
    redis_sentinels: str | None = Field(
        default=None,
        description="`host:port,host:port` of Redis Sentinels; `REDIS_URL` then names the db and password",
    )
    redis_sentinel_master: str = Field(default="mymaster", description="the Sentinel master name")
    redis_cluster: bool = Field(default=False, description="`REDIS_URL` names any node of a Redis Cluster")
    redis_wait_replicas: int | None = Field(
        default=None,
        description="replicas a worker's writes wait for (`WAIT`) before it acts on them; unset: 1 on a "
        "cluster, 0 otherwise; 0 for a cluster without replicas",
    )
    checkpoint_config: Literal["inline", "apart"] = Field(
        default="apart",
        description="where a run's configuration is kept: once an attempt in its own field of the run "
        "hash (`apart`: a ten-step run's commits carry about 2.8 KB less each, about 7-10 % less Redis "
        "CPU a step), or in every checkpoint (`inline`: set it while processes of a release without this "
        "setting still run, which cannot resume such a run, and before rolling back to one)",
    )
    checkpoint_transcript: Literal["inline", "apart"] = Field(
        default="apart",
        description="where a run's transcript is kept: in a key of its own beside the run hash, each "
        "commit appending the step's new messages (`apart`: commits stop growing with the run), or in "
        "every checkpoint (`inline`: set it while processes of a release without this setting still "
        "run, which cannot resume such a run, and before rolling back to one)",
    )
    redis_functions: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="run the Lua scripts as one Redis Functions library (`FCALL`; `on`, needs Redis 7) or "
        "by `EVALSHA` (`off`); `auto`: Functions when every master is Redis >= 7, chosen at start-up",
    )
    partitions: int | None = Field(
        default=None,
        description="partitions of the run key space (hash tags); unset: 16 on a cluster, 1 otherwise; "
        "fixed at deploy time: never change it while runs exist",
    )
    profiles: str | None = Field(
        default=None,
        description='path of a JSON file of agent profiles (`{"profiles": [...]}`, `shared/profiles.py`); '
        "unset: the built-ins only",
    )
    dev_profiles: bool = Field(
        default=False,
        description="load the test-only profile `scripted` and tools `echo`, `sleep`, `fail`, `flaky`; "
        "without it a profile file using them is refused",
    )
    run_duration_default_ms: int = Field(
        default=3_600_000, description="a run's `maxRunDurationMs` when neither it nor its profile sets one"
    )
    run_duration_max_ms: int = Field(
        default=24 * 3_600_000, description="no run lasts longer, whatever its profile or input says"
    )

    # retention
    stream_maxlen: int = Field(default=10_000, description="events kept per run stream")
    retention_s: int = Field(
        default=7 * 24 * 3600,
        description="streams and results of finished runs expire after this, and a session's history this "
        "long after its latest run ended",
    )
    idempotency_ttl_s: int | None = Field(
        default=None,
        ge=1,
        description="how long an `Idempotency-Key` (submit, retry, fork) answers with the run it made: "
        "from its first use; after, the same key makes a new run. Unset: as long as that run is kept "
        "in Redis (`AGENTMILL_RETENTION_S`, or `AGENTMILL_LIVE_RETENTION_S` after it is archived)",
    )

    # api
    api_host: str = Field(
        default="127.0.0.1", description="where `agentmill api` listens (the image sets `0.0.0.0`)"
    )
    api_port: int = Field(default=8000, description="the port `agentmill api` listens on")
    api_tokens: str | None = Field(
        default=None, description="`token=tenant,token2=tenant2`: bearer tokens and their tenants"
    )
    api_tokens_file: str | None = Field(
        default=None, description="the same, one `token=tenant` a line, from a mounted file"
    )
    operator_tenants: str = Field(
        default="",
        description="`a,b`: tenants whose tokens may read the pool as a whole (`GET /v1/pool`, the "
        "console's Pool page: workers, queues, every tenant's run counts); others get 403; with auth "
        "disabled the open tenant may",
    )
    api_metrics_port: int = Field(
        default=-1,
        description="`-1`: the API's `/metrics` on the API port; else on its own listener on this port "
        "(`0` an ephemeral one) and 404 on the API port",
    )
    metrics_token: str | None = Field(
        default=None,
        description="the API's `/metrics` is served only with `Authorization: Bearer <this>` (401 otherwise)",
    )
    auth_disabled: bool = Field(
        default=False, description="turns auth off for local use (the API logs a warning)"
    )
    max_body_bytes: int = Field(default=2_000_000, description="larger request bodies get 413")
    max_batch: int = Field(
        default=limits.MAX_BATCH_ITEMS,
        description="most runs in one batch request (`Submitter.check_batch_size`); beyond, 413",
    )
    max_queue_depth: int = Field(
        default=100_000, description="above this, submissions get 429 with `Retry-After`"
    )
    budget_hold_ms: int = Field(
        default=900_000,
        ge=100,
        description="how long a model call's hold on its tenant's day budget (tokensPerDay, costUsdPerDay) "
        "lives unsettled: the hold of a worker that died mid-call is released after this; longer than "
        "your slowest model call",
    )
    usage_retention_days: int = Field(
        default=400, ge=1, description="days a tenant's usage by day (`GET /v1/usage`) is kept"
    )
    max_streams_per_tenant: int = Field(
        default=100,
        description="open SSE streams and long-polls of one tenant per API process; beyond, 429",
    )
    max_streams: int = Field(default=1_000, description="the same for all tenants together per API process")
    sse_heartbeat_s: float = Field(default=10.0, description="SSE comment heartbeat while a run is idle")
    redis_timeout_s: float = Field(
        default=5.0,
        description="socket timeout of every Redis call from the API (blocking stream reads: plus their "
        "block)",
    )
    header_timeout_s: float = Field(
        default=10.0, description="a connection whose request headers take longer is closed"
    )
    body_timeout_s: float = Field(
        default=30.0, description="a request body that takes longer to arrive gets 408"
    )
    id_secret: str | None = Field(
        default=None,
        description="HMAC key of the ids named tenants' runs, sessions and schedules are kept under "
        "(`tsc_…`, `producer.scope.Scope`): the same on every API and worker process, set once (another "
        "key loses every stored run of a named tenant); unset: a public development key, and `agentmill "
        "api` and `agentmill worker` refuse to start when `AGENTMILL_API_TOKENS` or "
        "`AGENTMILL_TENANT_QUOTAS` name a tenant other than `default` (a worker's firer refuses a "
        "named tenant's schedule)",
    )
    webhooks: bool = Field(default=True, description="`false`: this API process does not deliver webhooks")
    webhook_secret: str | None = Field(
        default=None,
        description="HMAC-SHA256 key of `X-Agentmill-Signature` on completion webhooks; unset: sent "
        "unsigned with `X-Agentmill-Unsigned: true`",
    )
    webhook_allow_hosts: str = Field(
        default="", description="comma-separated hosts exempt from the private-address guard"
    )
    webhook_max_attempts: int = Field(
        default=8, description="deliveries of one webhook before it is given up"
    )

    # schedules
    schedules: bool = Field(
        default=True,
        description="`false`: this process (a worker or an API process) does not fire schedules; some "
        "process must",
    )
    schedule_poll_ms: int = Field(
        default=200, ge=10, description="how often a process looks for due schedules (jittered ±20 %)"
    )
    schedule_lease_ms: int = Field(
        default=5_000,
        ge=100,
        description="a firer's claim on a due schedule; a firer that dies holding one delays that "
        "schedule's firings this long (they are made then, under the catch-up rule)",
    )
    live_tenants_ttl_ms: int = Field(
        default=60_000,
        ge=300,
        description="how long an API process's word that its tokens name a tenant lasts: it repeats it "
        "every third of this; a tenant no running API process names has its schedules held this long "
        "after the last one stopped naming it",
    )

    # cli
    api_url: str | None = Field(
        default=None,
        description="the API the CLI's commands go through when they name no `--api URL` (`--redis` or "
        "`--tenant` still go straight to Redis); unset: straight to Redis (`REDIS_URL`)",
    )
    token: str | None = Field(
        default=None,
        description="the bearer token the CLI sends with `--api URL` when `--token` is not given",
    )
    cli_state_dir: str = Field(
        default="",
        description="where `agentmill submit` journals the parts of each batch it sent, to resume it; "
        "unset: `$XDG_STATE_HOME/agentmill`, else `~/.local/state/agentmill`",
    )

    # traces (docs/operations.md#traces; the exporter itself reads the standard OTEL_* variables)
    trace_propagation: Literal["none", "pool", "all"] = Field(
        default="pool",
        description="how far a submitter's trace context (traceparent, tracestate) goes: `none`, the API keeps "
        "none and a run starts its own trace; `pool`, the pool's spans continue it but requests leaving the "
        "pool (model providers, HTTP and MCP tools) carry no trace headers; `all`, those requests carry "
        "the current span's traceparent and the submitter's tracestate too",
    )
    trace_content: bool = Field(
        default=False,
        description="record message contents in trace spans (the model's input and output messages, tool "
        "arguments and results); off: only names, ids, models, token counts and outcomes",
    )

    # logs
    log_json: bool = Field(
        default=False, description="JSON log lines (with `runId`, `sessionId`, attempt, worker id)"
    )
    log_level: str = Field(default="INFO", description="the log level (`DEBUG`, `INFO`, `WARNING`, …)")

    @field_validator("redis_url")
    @classmethod
    def _redis_url_has_a_scheme(cls, value: str) -> str:
        """Refused here, not by the first client made from it (a traceback, in whatever started it)."""
        if not value.startswith(REDIS_SCHEMES):
            raise ValueError(
                "must be a URL starting with redis://, rediss:// or unix:// (e.g. redis://host:6379/0)"
            )
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings; SettingsError (the settings named as they are set, a line each) when
    the environment holds a value they refuse."""
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError(describe(exc, Settings.model_fields)) from None
