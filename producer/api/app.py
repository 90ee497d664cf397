"""The HTTP API (FastAPI on uvicorn): submit, follow, control runs. Every route is in the OpenAPI doc.

FastAPI because it is the ecosystem's default ASGI framework: pydantic bodies (our contracts are
pydantic already), an OpenAPI document for free, and Starlette's streaming responses for SSE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from redis.asyncio import Redis
from redis.exceptions import RedisError

from agentmill_client import __version__
from producer.api import (
    errors,
    routes_agents,
    routes_catalog,
    routes_deletion,
    routes_keys,
    routes_ops,
    routes_pool,
    routes_restore,
    routes_runs,
    routes_schedules,
    routes_ui,
    routes_usage,
    sse,
)
from producer.api.errors import OrjsonResponse
from producer.api.metrics import ApiMetrics
from producer.api.middleware import BodyLimit, Observe
from producer.api.sse import MAX_BLOCK_S
from producer.api.state import Api
from producer.restore import StateOf
from producer.schedules.live import beat_live_tenants, publish_live_tenants
from shared import payload_crypto
from shared.gc_settle import settle_gc
from shared.outage_log import OutageLog
from shared.partitions import Partitions
from shared.redis_watch import RedisWatch
from shared.script_sending import Parts
from shared.scripts import prepare_scripts
from shared.settings import Settings, get_settings

__all__ = ["create_app", "warm_routes"]

log = logging.getLogger("agentmill.api")


async def _close(pools: Sequence[Parts]) -> None:
    for p in pools:
        await p.aclose()


def _start_failed(app: FastAPI, task: asyncio.Task[None]) -> None:
    """A start-up that failed in the background once Redis answered (not an outage: a refusal
    such as AGENTMILL_REDIS_FUNCTIONS=on on Redis 6) is logged, and /readyz says it from then on."""
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    log.error("API start-up failed after Redis answered: %s: %s", type(exc).__name__, exc, exc_info=exc)
    app.state.start_failed = f"start-up failed: {type(exc).__name__}: {exc}"


def warm_routes(routes: Sequence[object]) -> int:
    """Each included router's routes built now (their parameters' and answers' validators), as
    FastAPI would at the first request that reaches that router: 100-odd ms of CPU in all, else paid
    inside one request's loop turn, the first one after start-up of each router. The routers it
    warmed, for the test."""
    warmed = 0
    for route in routes:
        candidates = getattr(route, "effective_candidates", None)  # FastAPI's included router
        if callable(candidates):
            warmed += 1 + warm_routes(candidates())
            low = getattr(route, "effective_low_priority_routes", None)
            if callable(low):
                low()
    return warmed


def create_app(
    settings: Settings | None = None,
    *,
    state_of: StateOf,
    redis: Redis | Parts | None = None,
    background: bool = True,
) -> FastAPI:
    """``redis``: a client (or started Partitions) the caller owns; else the app builds its own
    from the settings (REDIS_URL, AGENTMILL_REDIS_CLUSTER, AGENTMILL_PARTITIONS) and closes them.
    With its own, a Redis that does not answer at start-up is waited for in the background (the
    outage logged once, and its end) while the app serves /healthz, and 503 elsewhere; then the app
    watches it (shared/redis_watch.py: /readyz, outages logged once). ``state_of``: what a fork
    starts from (the process root gives it: app.api)."""
    settings = settings or get_settings()
    payload_crypto.install(settings.data_keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as own:
            tasks: list[asyncio.Task[None]] = []
            stop = asyncio.Event()

            async def connect(pools: Sequence[Redis | Parts]) -> None:
                """With Redis reached and the scripts prepared: the Api and its loops."""
                api = Api(settings, *pools, closing=app.state.closing, watch=watch, metrics=app.state.metrics,
                          state_of=state_of)  # fmt: skip
                if api.producer.archive is not None:
                    own.push_async_callback(api.producer.archive.aclose)
                if settings.api_metrics_port >= 0:
                    from producer.api.metrics_port import MetricsListener

                    listener = MetricsListener(api, settings.api_host, settings.api_metrics_port)
                    api.metrics_port = await listener.start()
                    own.push_async_callback(listener.stop)
                # The tenants whose schedules fire (auth off: the default tenant alone), said now and
                # every third of their TTL: producer.schedules.live
                named = [] if api.auth.disabled else sorted({t for _, t in api.auth.tokens})
                ttl = settings.live_tenants_ttl_ms
                await publish_live_tenants(api.parts, api.producer.scripts, named, ttl)
                in_outage = watch.in_outage if watch is not None else None
                if background:
                    tasks.append(asyncio.create_task(
                        beat_live_tenants(api.parts, api.producer.scripts, named, ttl, stop, in_outage)
                    ))  # fmt: skip
                if background and settings.webhooks:
                    from producer.webhooks import deliver_forever

                    tasks.append(asyncio.create_task(
                        deliver_forever(api.producer.parts, settings, stop, in_outage=in_outage)
                    ))  # fmt: skip
                if background and settings.schedules:
                    from producer.schedules.firer import Firer
                    from producer.schedules.lag import FiringLag

                    firer = Firer(api.producer, lag=FiringLag(api.metrics.registry), in_outage=in_outage)
                    tasks.append(asyncio.create_task(firer.run_forever(stop)))
                if watch is not None:
                    tasks.append(asyncio.create_task(watch.run_forever()))
                warm_routes(app.router.routes)  # not in the first request's turn of each router
                settle_gc()  # what start-up built, frozen: no collection walks it in a request's turn
                app.state.api = api

            async def own_pools() -> None:
                """The API's own pools, once Redis answers (waiting as long as it takes: meanwhile
                /healthz answers, /readyz and the rest 503)."""
                assert watch is not None
                while True:
                    await watch.wait_reachable()
                    # Two sets of pools: short calls on one, blocking stream reads (SSE, long-polls)
                    # on their own, so streams can never take the connections /readyz, submissions
                    # and reads need.
                    pools: list[Parts] = [
                        Partitions.from_settings(
                            settings, retries=2, max_connections=size, socket_timeout=timeout
                        )
                        for size, timeout in (
                            (256, settings.redis_timeout_s),
                            (settings.max_streams + 8, settings.redis_timeout_s + MAX_BLOCK_S),
                        )
                    ]
                    try:
                        for parts in pools:
                            await parts.start()
                        await prepare_scripts(pools[0], settings)  # Functions or EVALSHA, on every master
                    except (RedisError, OSError) as exc:  # gone again between the probe and here
                        watch.outage.unreachable(f"{type(exc).__name__}: {exc}")
                    except BaseException:
                        await _close(pools)
                        raise
                    else:
                        own.push_async_callback(_close, pools)
                        await connect(pools)
                        return
                    await _close(pools)
                    await asyncio.sleep(1.0)

            watch: RedisWatch | None = None
            starting: asyncio.Task[None] | None = None
            if redis is not None:  # the caller's client: started, and reachable as far as we know
                await prepare_scripts(redis, settings)  # Functions or EVALSHA; the library on every master
                await connect([redis, redis])
            else:
                watch = RedisWatch(settings, OutageLog(log, settings.redis_url))
                own.push_async_callback(watch.aclose)
                app.state.redis_watch = watch
                if await watch.check():
                    await own_pools()  # Redis answers: ready when the server starts listening
                else:
                    starting = asyncio.create_task(own_pools())
                    starting.add_done_callback(lambda t: _start_failed(app, t))
            try:
                yield
            finally:
                stop.set()
                if starting is not None:
                    starting.cancel()
                    await asyncio.gather(starting, return_exceptions=True)
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    app = FastAPI(
        title="agentmill",
        version=__version__,
        description="Submit LLM agent runs, follow their events, control them.",
        lifespan=lifespan,
        default_response_class=OrjsonResponse,
        # No Swagger UI or ReDoc pages: FastAPI's load their scripts from a CDN, unpinned, on the
        # console's origin. /openapi.json is served; any OpenAPI viewer can read it.
        docs_url=None,
        redoc_url=None,
    )
    app.state.closing = asyncio.Event()  # set by ApiServer on SIGTERM: open streams end (serve.py)
    app.state.redis_watch = None  # with the app's own pools: their RedisWatch
    app.state.metrics = ApiMetrics()  # the Api's, once it is made
    for exc_type, handler in errors.HANDLERS:
        app.add_exception_handler(exc_type, handler)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s)
    app.add_middleware(Observe)
    for router in (
        routes_runs.router,
        routes_deletion.router,
        routes_restore.router,
        sse.router,
        routes_ops.router,
        routes_catalog.router,
        routes_pool.router,
        routes_schedules.router,
        routes_agents.router,
        routes_usage.router,
        routes_keys.router,
        routes_ui.router,
    ):
        app.include_router(router)
    return app
