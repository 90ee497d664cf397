"""The shared state of one API process (``Api``) and the dependencies every route takes: the
process state and the caller's tenant."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Annotated

from fastapi import Depends, Header, Request
from redis.asyncio import Redis

from agentmill_client.errors import ApiError
from producer.api.auth import Authenticator, Caller
from producer.api.key_cache import KeyCache
from producer.api.metrics import ApiMetrics
from producer.api.scopes import scope_of
from producer.api.streams import StreamLimiter
from producer.deletion_jobs import DeletionJobs
from producer.gauges import ClusterGauges, read_gauges, running_caps
from producer.key_store import KeyStore
from producer.restore import Restorer, StateOf
from producer.schedules.store import ScheduleStore
from producer.service import Producer, RunRecord
from shared import trace_context
from shared.profiles import profiles_from
from shared.quotas import Quotas
from shared.redis_watch import RedisWatch
from shared.script_sending import Parts
from shared.settings import Settings

__all__ = [
    "Api",
    "ApiDep",
    "CallerDep",
    "Tenant",
    "api_of",
    "caller_of",
    "get_api",
    "record_or_404",
    "tenant_of",
]

log = logging.getLogger("agentmill.api")


class Api:
    """Shared state of one API process."""

    def __init__(
        self,
        settings: Settings,
        redis: Redis | Parts,
        stream_redis: Redis | Parts | None = None,
        *,
        closing: asyncio.Event | None = None,
        watch: RedisWatch | None = None,
        metrics: ApiMetrics | None = None,
        state_of: StateOf,
    ) -> None:
        self.settings = settings
        self.state_of = state_of  # what a fork starts from (producer.restore.StateOf)
        self.watch = watch  # the app's own pools: whether Redis answers now (shared/redis_watch.py)
        self.closing = closing or asyncio.Event()  # set when the server begins to shut down
        self.producer = Producer(
            redis,
            settings=settings,
            profiles=profiles_from(settings.profiles, dev=settings.dev_profiles),
            stream_redis=stream_redis,
        )
        self.parts = self.producer.parts
        self.schedules = ScheduleStore(self.producer)
        self.deletions = DeletionJobs(self.producer)  # and its Eraser: runs and sessions deleted
        self.streams = StreamLimiter(settings.max_streams_per_tenant, settings.max_streams)
        self.quotas = Quotas(settings)
        self.keys = KeyStore(self.parts, settings)
        self.auth = Authenticator(settings, KeyCache(self.keys))
        self.metrics = metrics or ApiMetrics()
        self.metrics.streams = self.streams  # its gauges of open streams read this limiter
        self.running_caps = running_caps(self.quotas, (tenant for _, tenant in self.auth.tokens))
        self.metrics_port: int | None = None  # the port of the /metrics listener, once it listens
        self._depth = (0.0, 0)
        self.sse_heartbeat_s = settings.sse_heartbeat_s

    async def queue_depth(self) -> int:
        at, depth = self._depth
        if time.monotonic() - at > 0.5:
            depth = await self.producer.queue_depth()
            self._depth = (time.monotonic(), depth)
        return depth

    async def cluster_gauges(self) -> ClusterGauges | None:
        """Queue depth, runs awaiting approval and the scaling signal, or None when Redis does not
        answer within 2 s (the scrape then exports none of them)."""
        try:
            return await asyncio.wait_for(
                read_gauges(self.parts, self.producer.scripts, self.running_caps), 2.0
            )
        except Exception as exc:  # any failure to read is "unknown", never a stale value
            log.warning("/metrics: the cluster gauges are not exported: Redis did not answer (%r)", exc)
            return None

    def restorer(self) -> Restorer:
        """Retries and forks of this process's runs."""
        return Restorer(self.producer, self.state_of)

    def check_metrics_token(self, authorization: str | None) -> None:
        """401 unless AGENTMILL_METRICS_TOKEN is unset or given as the bearer token (constant time)."""
        want = self.settings.metrics_token
        if not want:
            return
        given = (
            authorization[7:].strip() if authorization and authorization.lower().startswith("bearer ") else ""
        )
        if not hmac.compare_digest(given.encode(), want.encode()):
            raise ApiError(
                401,
                "unauthorized",
                "/metrics wants the metrics token",
                headers={"WWW-Authenticate": "Bearer"},
            )

    async def admit(self, n: int = 1) -> None:
        """Backpressure: refuse new work while the queue is deeper than configured."""
        if await self.queue_depth() + n > self.settings.max_queue_depth:
            raise ApiError(
                429,
                "queue_full",
                f"the queue holds more than {self.settings.max_queue_depth} runs; retry later",
                headers={"Retry-After": "5"},
            )

    def trace(self, traceparent: str | None, tracestate: str | None) -> str:
        """What a submission stores of its trace headers (shared.trace_context): nothing when
        AGENTMILL_TRACE_PROPAGATION=none keeps the submitter's trace out of the pool."""
        if self.settings.trace_propagation == "none":
            return ""
        return trace_context.stored(traceparent, tracestate)


def get_api(request: Request) -> Api:
    """The process's Api; 503 while the API still waits for Redis at start-up (producer/api/app.py)."""
    api: Api | None = getattr(request.app.state, "api", None)
    if api is None:
        raise ApiError(503, "redis_unavailable", starting_reason(request), headers={"Retry-After": "2"})
    return api


def starting_reason(request: Request) -> str:
    """Why the API is not serving: it waits for Redis (and what the last probe met), or its
    start-up failed once Redis answered."""
    failed: str | None = getattr(request.app.state, "start_failed", None)
    if failed:
        return failed
    watch: RedisWatch | None = getattr(request.app.state, "redis_watch", None)
    why = f" ({watch.outage.reason})" if watch is not None and watch.outage.reason else ""
    return f"starting: waiting for Redis{why}"


async def caller_of(request: Request, authorization: Annotated[str | None, Header()] = None) -> Caller:
    """The authenticated caller, holding the scope its route needs (producer/api/scopes.py): 401 or
    403 otherwise. Kept on ``request.state.caller`` for the audit log (producer/audit.py)."""
    caller = await get_api(request).auth.caller(authorization)
    route = request.scope.get("route")
    caller.require(scope_of(request.method, getattr(route, "path", "")))
    request.state.caller = caller
    return caller


async def tenant_of(caller: Annotated[Caller, Depends(caller_of)]) -> str:
    return caller.tenant


async def api_of(request: Request) -> Api:
    """``get_api`` as a dependency: a coroutine, so FastAPI calls it on the loop rather than
    handing it to its thread pool (a thread hop in every request, and a thread started in the first)."""
    return get_api(request)


ApiDep = Annotated[Api, Depends(api_of)]
Tenant = Annotated[str, Depends(tenant_of)]
CallerDep = Annotated[Caller, Depends(caller_of)]


async def record_or_404(api: Api, run_id: str, tenant: str) -> RunRecord:
    rec = await api.producer.get(run_id, tenant=tenant)
    if rec is None:
        raise ApiError(404, "unknown_run", f"no run {run_id}")
    return rec
