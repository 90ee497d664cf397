"""GET /v1/runs/{run_id}/events: a run's events as Server-Sent Events (resumable by seq), or a JSON page."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Header, Query, Request, Response

from agentmill_client import limits
from agentmill_client.api import EventsPage
from agentmill_client.codec import to_jsonable
from agentmill_client.errors import ApiError
from producer.api.errors import COMMON_ERRORS, ErrorResponse, OrjsonResponse
from producer.api.state import Api, ApiDep, caller_of, get_api, record_or_404
from producer.api.streams import SSE, SlotStreamingResponse
from shared import api_keys, keys
from shared.loop import unless_closing

__all__ = ["MAX_BLOCK_S", "events", "router"]

MAX_BLOCK_S = 5.0  # longest blocking stream read (XREAD BLOCK) of an SSE stream or long-poll
router = APIRouter()


async def reader_of(
    request: Request,
    run_id: str,
    token: Annotated[
        str | None,
        Query(
            max_length=2048,
            description="a read token of this run (POST /v1/runs/{run_id}/token), "
            "instead of a bearer token: what a browser's EventSource can send",
        ),
    ] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> str:
    """The tenant reading this run's events: a read token's (for this run only), else the bearer
    token's caller's (scope read)."""
    if token is None:
        return (await caller_of(request, authorization)).tenant
    api = get_api(request)
    grant = api_keys.verify_read_token(api.keys.secret, token, int(time.time() * 1000))
    if grant == "expired":
        raise ApiError(401, "token_expired", "the read token has expired")
    if isinstance(grant, str):
        raise ApiError(401, "unauthorized", "token: not a valid read token")
    if grant.run_id != run_id:
        raise ApiError(403, "token_scope", f"this read token reads the events of run {grant.run_id} only")
    return grant.tenant


@router.get(
    "/v1/runs/{run_id}/events",
    responses={
        **COMMON_ERRORS,
        404: {"model": ErrorResponse},
        200: {
            "description": "text/event-stream (id: seq, event: kind, data: RunEvent JSON), or with format=json an EventsPage",
            "model": EventsPage,  # registers the schema; FastAPI puts it under application/json
            "content": {"text/event-stream": {}},
        },
    },
    summary="A run's events: Server-Sent Events, resumable; or a JSON page",
)
async def events(
    run_id: str,
    request: Request,
    api: ApiDep,
    tenant: Annotated[str, Depends(reader_of)],
    after: Annotated[int | None, Query(ge=0, le=limits.MAX_SEQ)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    format: Annotated[str, Query(pattern="^(sse|json)$")] = "sse",
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    rec = await record_or_404(api, run_id, tenant)
    key, part = rec.key, api.parts.layout.of_key(rec.stream_key)
    start = after if after is not None else _seq(last_event_id)
    if format == "json":
        page = await api.producer.read_events(
            key, after=start, limit=limit, label=run_id, part=part, archived=rec.archived
        )
        return OrjsonResponse(
            {"events": [to_jsonable(e) for e in page], "next": page[-1].seq if page else start}
        )
    slot = api.streams.acquire(tenant, SSE)
    return SlotStreamingResponse(
        _sse(api, request, key, start, label=run_id, part=part, archived=rec.archived),
        slot,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _seq(last_event_id: str | None) -> int:
    """Last-Event-ID read as ``?after`` is: absent or empty is 0; anything but a seq is a 422
    (never a silent replay from the start)."""
    value = (last_event_id or "").strip()
    if not value:
        return 0
    if not (value.isascii() and value.isdigit()):
        raise ApiError(422, "invalid_input", f"Last-Event-ID: {value[:40]!r} is not an event seq")
    if len(value) > 19 or int(value) > limits.MAX_SEQ:
        raise ApiError(422, "invalid_input", f"Last-Event-ID: an event seq is at most {limits.MAX_SEQ}")
    return int(value)


async def _sse(
    api: Api,
    request: Request,
    run_id: str,
    after: int,
    *,
    label: str | None = None,
    part: keys.Partition | None = None,
    archived: bool = False,
) -> AsyncIterator[bytes]:
    """Events after ``after``; a comment line while idle; ends after the terminal event, or when
    the process is shutting down (the client resumes elsewhere with Last-Event-ID). A run archived
    meanwhile has its stream dropped from Redis: the rest is read from the archive."""
    last = after
    block_ms = int(min(api.sse_heartbeat_s, MAX_BLOCK_S) * 1000)
    idle_since = time.monotonic()
    yield b": connected\n\n"
    while True:
        if await request.is_disconnected():
            return
        read, page = await unless_closing(
            api.closing,
            api.producer.read_events(
                run_id,
                after=last,
                limit=200,
                block_ms=None if archived else block_ms,
                label=label,
                part=part,
                archived=archived,
            ),
        )
        if not read:
            return
        assert page is not None
        if not page:
            if time.monotonic() - idle_since >= api.sse_heartbeat_s:
                idle_since = time.monotonic()
                yield b": keep-alive\n\n"
            rec = await api.producer.get(run_id)
            if rec is None or (rec.status.terminal and rec.last_seq <= last):
                return  # finished, and everything it wrote has been sent (or the stream expired)
            archived = rec.archived
            continue
        idle_since = time.monotonic()
        for e in page:
            last = e.seq
            data = orjson.dumps(to_jsonable(e))
            yield b"id: %d\nevent: %s\ndata: %s\n\n" % (e.seq, e.kind.value.encode(), data)
            if e.terminal:
                return
