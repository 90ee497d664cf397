"""/healthz, /readyz and /metrics: probes and Prometheus metrics."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from redis.exceptions import RedisError

from agentmill_client.errors import ApiError
from producer.api.errors import ErrorResponse
from producer.api.state import Api, ApiDep, get_api

__all__ = ["healthz", "metrics", "metrics_response", "readyz", "router"]

router = APIRouter()


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"model": ErrorResponse}}, summary="Redis is reachable")
async def readyz(request: Request) -> dict[str, str]:
    """Every Redis node (each master of a cluster) answers a PING within 2 s. 503 with the reason
    otherwise, and while the API still waits for Redis at start-up."""
    api = get_api(request)  # 503 "starting: waiting for Redis (…)"
    try:
        pings = (c.ping() for c in api.parts.topology.clients())
        await asyncio.wait_for(asyncio.gather(*pings), 2.0)
    except TimeoutError:  # up but not answering (stalled, overloaded): not ready either
        raise ApiError(
            503, "redis_unavailable", "Redis did not answer within 2 s", headers={"Retry-After": "2"}
        ) from None
    except (RedisError, OSError) as exc:
        raise ApiError(
            503, "redis_unavailable", f"Redis is unreachable ({type(exc).__name__}: {exc})",
            headers={"Retry-After": "2"},
        ) from None  # fmt: skip
    return {"status": "ready"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}},
        401: {"model": ErrorResponse},
        404: {"model": ErrorResponse},
    },
    summary="Prometheus metrics",
)
async def metrics(api: ApiDep, authorization: Annotated[str | None, Header()] = None) -> Response:
    """With AGENTMILL_API_METRICS_PORT set, served on that port only (404 here); with
    AGENTMILL_METRICS_TOKEN set, only to that bearer token (401)."""
    if api.settings.api_metrics_port >= 0:
        raise ApiError(404, "not_found", "Not Found")
    return await metrics_response(api, authorization)


async def metrics_response(api: Api, authorization: str | None) -> Response:
    """The scrape, wherever it is served (here or on the metrics port, producer/api/metrics_port.py)."""
    api.check_metrics_token(authorization)
    body, ctype = api.metrics.render(await api.cluster_gauges())
    return Response(body, media_type=ctype)
