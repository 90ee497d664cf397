"""The worker process: the arq worker (worker/process/arq_worker.py) plus its heartbeat (one lease per
worker, beaten on every partition), reconciler, archiver (with the archive on) and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import httpx
from arq.connections import ArqRedis
from arq.worker import func
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import RedisError

from shared import netguard, payload_crypto, scripts
from shared.dispatch import RUN_FUNCTION, deserialize, serialize
from shared.gc_settle import GC_THRESHOLDS, settle_gc
from shared.loop import unless_closing
from shared.outage_log import OutageLog
from shared.partitions import Partitions
from shared.process_metrics import register_process_metrics
from shared.profiles import AgentProfile, profiles_from
from shared.quotas import Quotas
from shared.redis_watch import RedisWatch
from shared.scripts import prepare_scripts
from shared.settings import Settings, get_settings
from worker.adapters.lease import LeaseBackend, WorkerLease, add_lease_hook, lease_guarded_client
from worker.adapters.worker_beat import forget_worker
from worker.process import failpoints
from worker.process.archiving import archive_forever
from worker.process.arq_worker import JOB_TIMEOUT_S, ResilientWorker, claim_size, run_agent
from worker.process.deps import WorkerDeps
from worker.process.health import HealthServer
from worker.process.lease_keeping import LeaseKeeping
from worker.process.wake import Wake
from worker.telemetry import tracing
from worker.telemetry.metrics import MetricsObserver
from worker.telemetry.observer import Observer
from worker.telemetry.pool_report import PoolReport

__all__ = [
    "GC_THRESHOLDS",
    "JOB_TIMEOUT_S",
    "ResilientWorker",
    "WorkerProcess",
    "claim_size",
    "lease_margin_ms",
    "new_worker_id",
    "run_agent",
]


log = logging.getLogger("agentmill.worker")

T = TypeVar("T")


def lease_margin_ms(settings: Settings) -> int:
    """How much earlier than Redis a worker considers its lease over: a beat interval, at least a
    tenth of the lease (clock-rate differences, the time from the check to the bytes on the wire)."""
    return min(max(settings.heartbeat_ms, settings.lease_ms // 10), settings.lease_ms // 2)


def new_worker_id(settings: Settings) -> str:
    return settings.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


# A loop that the process runs beside its own while it holds runs, stopped with them: given the
# process's Redis, settings, profiles and metrics registry. The app layer adds the schedule firer
# (app.worker): the worker knows how to run loops, not what a schedule is.
SideLoop = Callable[[Partitions[Any], Settings, dict[str, AgentProfile], CollectorRegistry], Awaitable[None]]


class WorkerProcess(LeaseKeeping):
    """One worker process: an arq Worker plus the loops that keep its runs honest."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        profiles: dict[str, AgentProfile] | None = None,
        observer: Observer | None = None,
        burst: bool = False,
        side_loops: Sequence[SideLoop] = (),
    ) -> None:
        self.settings = settings or get_settings()
        self.side_loops = tuple(side_loops)
        failpoints.arm(self.settings.failpoints)
        payload_crypto.install(self.settings.data_keys)
        self.profiles = (
            profiles
            if profiles is not None
            else profiles_from(self.settings.profiles, dev=self.settings.dev_profiles)
        )
        self.metrics = MetricsObserver(
            tools={t for p in self.profiles.values() for t in p.tool_names()},
            models={(p.name, link.model_name) for p in self.profiles.values() for link in p.chain},
            fallbacks={(p.name, *step) for p in self.profiles.values() for step in p.fallback_steps()},
            mcp_servers={s.name for p in self.profiles.values() for s in p.mcp_servers},
        )
        register_process_metrics(self.metrics.registry)
        self.observer = observer or self.metrics
        self.health: HealthServer | None = None
        self.metrics_port: int | None = None
        self.burst = burst
        self.worker_id = new_worker_id(self.settings)
        self.stopping = asyncio.Event()
        self._bg: list[asyncio.Task[None]] = []
        s = self.settings
        self.watch = RedisWatch(s, OutageLog(log, s.redis_url))  # outages logged once; /readyz
        self.lease = WorkerLease(s.lease_ms, lease_margin_ms(s))
        self.incarnation = 1
        if any(p.mcp_servers for p in self.profiles.values()):
            # The mcp SDK takes seconds to import: now, not on the event loop of a worker holding runs.
            import worker.tools.mcp  # noqa: F401
        scripts.warm()  # off the event loop that will hold runs
        # httpx's connection pools import anyio's asyncio backend the first time they close a
        # connection (a model's or a tool's, or every client at shutdown, while runs may still be
        # draining): 70 ms of imports on the loop.
        import anyio._backends._asyncio  # noqa: F401

        # One TLS context for the worker's clients (models, tools), built here: each loads the CA
        # bundle, about 25 ms; three of them held the loop 76-90 ms before it took runs.
        self.tls = httpx.create_ssl_context()

        settle_gc()

    async def run(self) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # first: a worker still waiting for Redis stops too
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        if s.worker_metrics_socket or s.worker_metrics_port >= 0:  # "starting" until the lease is taken
            self.health = HealthServer(
                self.metrics.registry, self.metrics.render, ready=False, redis_up=lambda: self.watch.up
            )
        if self.health is not None and s.worker_metrics_socket:  # one of `--processes N`: its supervisor asks
            await self.health.start_unix(s.worker_metrics_socket)
        elif self.health is not None:
            self.metrics_port = await self.health.start(s.worker_metrics_host, s.worker_metrics_port)
            log.info("worker %s serves /metrics, /healthz and /readyz on %s:%d", self.worker_id,
                     s.worker_metrics_host, self.metrics_port)  # fmt: skip
        tracing.propagate(s.trace_propagation)
        traced = tracing.configure(content=s.trace_content, instance_id=self.worker_id)
        if traced:
            log.info("worker %s exports traces over OTLP/HTTP", self.worker_id)
        try:
            if await self._unless_stopped(self._wait_for_redis()):
                await self._serve()
        finally:
            await self.watch.aclose()
            if self.health is not None:
                await self.health.stop()
            if traced:  # what the batch processor still holds goes out before the process ends
                await asyncio.to_thread(tracing.shutdown)

    async def _wait_for_redis(self) -> bool:
        """Until every node answers a PING (an outage at start-up logged once, and its end). The
        clients below retry quietly for tens of seconds a call, so they are not the ones that try first."""
        await self.watch.wait_reachable()
        return True

    async def _unless_stopped(self, coro: Coroutine[Any, Any, T]) -> T | None:
        """``coro``'s result, or None (``coro`` cancelled) if a stop is requested first."""
        done, result = await unless_closing(self.stopping, coro)
        if not done:
            log.info("worker %s: stopped while starting", self.worker_id)
        return result

    async def _serve(self) -> None:
        s = self.settings
        parts: Partitions[Redis] = Partitions.from_settings(s, retries=60)
        arq_parts: Partitions[ArqRedis] = Partitions.from_settings(s, retries=60, client_cls=ArqRedis)
        try:
            if await self._unless_stopped(self._start_clients(parts, arq_parts)):
                await self._serve_on(parts, arq_parts)
        finally:
            await parts.aclose()
            await arq_parts.aclose()

    async def _start_clients(self, parts: Partitions[Redis], arq_parts: Partitions[ArqRedis]) -> bool:
        await parts.start()
        await arq_parts.start()
        await prepare_scripts(parts, self.settings)  # Functions or EVALSHA; the library on every master
        return True

    async def _serve_on(self, parts: Partitions[Redis], arq_parts: Partitions[ArqRedis]) -> None:
        s = self.settings
        arq_pool = arq_parts.client(arq_parts.parts[0])  # arq's own records (health) on partition 0
        for pool in arq_parts.topology.clients():
            pool.job_serializer = serialize
            pool.job_deserializer = deserialize
        http = lease_guarded_client(
            self.lease, httpx.Limits(max_connections=200, max_keepalive_connections=50), self.tls
        )
        # HTTP tools: the SSRF guard's backend connects, the lease backend guards every write.
        tools_http = add_lease_hook(
            netguard.guarded_client(inner=LeaseBackend(self.lease), tls=self.tls), self.lease
        )
        self.deps = WorkerDeps(parts=parts, settings=s, profiles=self.profiles, http=http,
                               worker_id=self.worker_id, observer=self.observer, lease=self.lease,
                               guarded_http=tools_http)  # fmt: skip
        self.worker = ResilientWorker(
            functions=[func(run_agent, name=RUN_FUNCTION, max_tries=1_000_000, timeout=JOB_TIMEOUT_S)],
            redis_pool=arq_pool,
            queue_name=arq_parts.parts[0].queue,  # arq's own records (health) in partition 0's slot
            job_serializer=serialize,
            job_deserializer=deserialize,
            max_jobs=s.max_jobs,
            poll_delay=s.poll_delay_s,
            keep_result=60,
            handle_signals=False,
            burst=self.burst,
            ctx={"deps": self.deps},
            health_check_interval=10,
            # arq's own poll is not used: a poll counts the due jobs and the claim script picks
            # them (claim_jobs.lua looks at up to 1,024 a call); arq still asks for a limit.
            queue_read_limit=max(100, 16 * s.claim_batch),
        )
        self.worker.parts = arq_parts
        self.worker.wake = Wake(arq_parts, ride=self.worker._ride)  # its claim rides behind each wait
        self.worker.in_outage = self.watch.in_outage
        self.worker.scripts = self.deps.scripts
        self.worker.claim_batch = s.claim_batch
        self.worker.claim_check_ms = s.lease_ms
        self.worker.max_running = s.tenant_max_running
        self.worker.running_caps = Quotas(s).running_overrides_json
        try:
            # the first lease, before any job is taken
            if await self._unless_stopped(self._register()) is None:
                return
            settle_gc()  # again, with the clients and the arq worker (quick: the rest is frozen)
            await self._work()
        finally:
            await self.deps.aclose()
            await http.aclose()

    async def _work(self) -> None:
        s = self.settings
        report = PoolReport(self.deps.parts, self.metrics.registry)
        self._bg = [
            asyncio.create_task(self._heartbeat()),
            asyncio.create_task(self._reconciler()),
            asyncio.create_task(report.run_forever()),
            asyncio.create_task(self.watch.run_forever()),
        ]
        for side in self.side_loops:  # e.g. the schedules' firing loop (app.worker)
            self._bg.append(
                asyncio.create_task(_coro(side(self.deps.parts, s, self.profiles, self.metrics.registry)))
            )
        if (
            s.archive_url and s.worker_archiver
        ):  # finished runs to PostgreSQL, off the hot path (worker/process/archiving.py)
            self._bg.append(asyncio.create_task(archive_forever(self.deps, self.metrics)))
        if self.health is not None:
            self.health.ready = True
        self.main = asyncio.create_task(self.worker.main())
        log.info("worker %s started (max_jobs=%d, lease=%d ms)", self.worker_id, s.max_jobs, s.lease_ms)
        stop = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({self.main, stop}, return_when=asyncio.FIRST_COMPLETED)
            if self.stopping.is_set():
                await self._graceful_stop()
        finally:
            stop.cancel()
            for t in self._bg:
                t.cancel()
            await asyncio.gather(*self._bg, stop, return_exceptions=True)
            if not self.main.done():
                self.main.cancel()
            await asyncio.gather(self.main, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self.worker.close()
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(report.report(), 2.0)  # the last seconds' runs, too
            log.info("worker %s stopped", self.worker_id)

    def request_stop(self) -> None:
        if not self.stopping.is_set():
            deps: WorkerDeps | None = getattr(self, "deps", None)
            log.info(
                "worker %s: stop requested; draining %d runs", self.worker_id, len(deps.active) if deps else 0
            )
            if deps is not None:  # a run that starts from now on hands itself back at once: a new run
                deps.draining = True  # has no commit before its model call, where the drain would find it
            self.stopping.set()

    async def _graceful_stop(self) -> None:
        """Stop taking jobs; let in-flight steps reach a checkpoint; hand every run back to the queue."""
        self.worker.allow_pick_jobs = False
        self.deps.draining = True  # the runs of a claim still starting drain as they join
        for d in list(self.deps.active.values()):
            d.drain()
        grace = self.settings.drain_timeout_s
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._until_idle(), grace)
        for d in list(self.deps.active.values()):
            d.cancel_effects_for_shutdown()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._until_idle(), 5.0)
        tasks = [t for t in self.worker.tasks.values() if not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        if not self.deps.active:  # every run handed back: give the lease up at once
            # The heartbeat first: a beat after the lease is given up finds it gone and would take
            # a new one (and sweep for runs) while the process stops.
            for t in self._bg:
                t.cancel()
            await asyncio.gather(*self._bg, return_exceptions=True)
            with contextlib.suppress(RedisError, OSError):
                await forget_worker(
                    self.deps.parts, self.deps.scripts, self.deps.lease_id, only_if_expired=False
                )


async def _coro(aw: Awaitable[None]) -> None:
    await aw
