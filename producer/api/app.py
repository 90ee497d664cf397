"""The HTTP API (FastAPI on uvicorn): submit, follow, control runs. Every route is in the OpenAPI doc.

FastAPI because it is the ecosystem's default ASGI framework: pydantic bodies (our contracts are
pydantic already), an OpenAPI document for free, and Starlette's streaming responses for SSE.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from redis.asyncio import Redis

from agentmill_client import __version__
from producer.api import (
    errors,
    routes_catalog,
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
from producer.api.middleware import BodyLimit, observe
from producer.api.sse import MAX_BLOCK_S
from producer.api.state import Api
from producer.routing import Parts
from producer.schedules.live import publish_live_tenants
from shared.partitions import Partitions
from shared.scripts import prepare_scripts
from shared.settings import Settings, get_settings

__all__ = ["create_app"]


def create_app(
    settings: Settings | None = None, *, redis: Redis | Parts | None = None, background: bool = True
) -> FastAPI:
    """``redis``: a client (or started Partitions) the caller owns; else the app builds its own
    from the settings (REDIS_URL, AGENTMILL_REDIS_CLUSTER, AGENTMILL_PARTITIONS) and closes them."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as own:
            # Two sets of pools: short calls on one, blocking stream reads (SSE, long-polls) on their
            # own, so streams can never take the connections /readyz, submissions and reads need.
            pools: list[Redis | Parts] = [redis, redis] if redis is not None else []
            if redis is None:
                for size, timeout in (
                    (256, settings.redis_timeout_s),
                    (settings.max_streams + 8, settings.redis_timeout_s + MAX_BLOCK_S),
                ):
                    parts: Parts = Partitions.from_settings(
                        settings, retries=2, max_connections=size, socket_timeout=timeout
                    )
                    own.push_async_callback(parts.aclose)
                    await parts.start()
                    pools.append(parts)
                await prepare_scripts(pools[0], settings)  # Functions or EVALSHA; the library on every master
            api = Api(settings, *pools, closing=app.state.closing)
            app.state.api = api
            if api.producer.archive is not None:
                own.push_async_callback(api.producer.archive.aclose)
            if settings.api_metrics_port >= 0:
                from producer.api.metrics_port import MetricsListener

                listener = MetricsListener(api, settings.api_host, settings.api_metrics_port)
                api.metrics_port = await listener.start()
                own.push_async_callback(listener.stop)
            # The tenants whose schedules fire (auth off: the default tenant alone): producer.schedules.live
            await publish_live_tenants(
                api.parts, [] if api.auth.disabled else (t for _, t in api.auth.tokens)
            )
            tasks: list[asyncio.Task[None]] = []
            stop = asyncio.Event()
            if background and settings.webhooks:
                from producer.webhooks import deliver_forever

                tasks.append(asyncio.create_task(deliver_forever(api.producer.parts, settings, stop)))
            if background and settings.schedules:
                from producer.schedules.firer import Firer
                from producer.schedules.lag import FiringLag

                lag = FiringLag(api.metrics.registry)
                tasks.append(asyncio.create_task(Firer(api.producer, lag=lag).run_forever(stop)))
            try:
                yield
            finally:
                stop.set()
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
    for exc_type, handler in errors.HANDLERS:
        app.add_exception_handler(exc_type, handler)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s)
    app.middleware("http")(observe)
    for router in (
        routes_runs.router,
        routes_restore.router,
        sse.router,
        routes_ops.router,
        routes_catalog.router,
        routes_pool.router,
        routes_schedules.router,
        routes_usage.router,
        routes_ui.router,
    ):
        app.include_router(router)
    return app
