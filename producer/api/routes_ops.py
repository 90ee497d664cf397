"""/healthz, /readyz and /metrics: probes and Prometheus metrics."""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, Response

from producer.api.errors import ErrorResponse
from producer.api.state import ApiDep
from shared.errors import ApiError

__all__ = ["healthz", "metrics", "readyz", "router"]

router = APIRouter()


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"model": ErrorResponse}}, summary="Redis is reachable")
async def readyz(api: ApiDep) -> dict[str, str]:
    """Every Redis node (each master of a cluster) answers a PING within 2 s."""
    try:
        pings = (c.ping() for c in api.parts.topology.clients())
        await asyncio.wait_for(asyncio.gather(*pings), 2.0)
    except TimeoutError:  # up but not answering (stalled, overloaded): not ready either
        raise ApiError(
            503, "redis_unavailable", "Redis did not answer within 2 s", headers={"Retry-After": "2"}
        ) from None
    return {"status": "ready"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
    summary="Prometheus metrics",
)
async def metrics(api: ApiDep) -> Response:
    with contextlib.suppress(Exception):
        depth, awaiting = await api.producer.gauges()
        api.metrics.queue_depth.set(depth)
        api.metrics.awaiting.set(awaiting)
    body, ctype = api.metrics.render()
    return Response(body, media_type=ctype)
