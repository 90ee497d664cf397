"""/v1/runs (listing) and /v1/batches…: finding a tenant's runs and following its batches.

Every route answers within the caller's tenant only: the indexes and batch hashes it reads are
keyed by tenant, and a run another tenant owns is never read from them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from agentmill_client import limits
from agentmill_client.api import BatchAbortAnswer, BatchView, RunsPage
from agentmill_client.ids import ID_PATTERN
from producer.api.audited import Action, audited, event_actor
from producer.api.errors import COMMON_ERRORS, NOT_FOUND, ErrorResponse, not_found
from producer.api.state import ApiDep, Tenant
from producer.batch_results import export, parse_statuses
from producer.listing import CURSOR_MAX_CHARS, MS_FORMAT, Catalog, ListingError, RunFilter, parse_ms

__all__ = ["Cursor", "Limit", "Ms", "abort_batch", "batch_results", "batch_runs", "get_batch", "list_runs"]

router = APIRouter()
_404 = {**COMMON_ERRORS, **NOT_FOUND}
_400 = {**COMMON_ERRORS, 400: {"model": ErrorResponse, "description": "a cursor this API did not return"}}
Limit = Annotated[int, Query(ge=1, le=500, description="runs per page")]
Cursor = Annotated[
    str | None,
    Query(
        description="the `next` of the previous page, as it was returned: any other value is a 400 "
        f"`invalid_cursor` (at most {CURSOR_MAX_CHARS} characters)"
    ),
]


def _ms(value: object) -> object:
    """A time filter as the query wrote it: ASCII digits only (parse_ms), before pydantic's int."""
    if not isinstance(value, str):
        return value
    try:
        return parse_ms("ms", value)
    except ListingError:
        raise PydanticCustomError("ms_format", MS_FORMAT) from None


Ms = Annotated[int | None, BeforeValidator(_ms)]


async def _page(api: Any, tenant: str, flt: RunFilter, limit: int, cursor: str | None) -> dict[str, Any]:
    # A filter or cursor that cannot be used raises ListingError: errors.on_listing_error answers it.
    runs, nxt = await Catalog(api.producer).list_runs(tenant, flt, limit=limit, cursor=cursor)
    return {"runs": runs, "next": nxt}


@router.get("/v1/runs", response_model=RunsPage, responses=_400, summary="List and search runs, newest first")
async def list_runs(
    api: ApiDep,
    tenant: Tenant,
    status: Annotated[
        str | None,
        Query(
            description="queued, running, awaiting_human, awaiting_tools, awaiting_children, awaiting_model, completed, failed, aborted, superseded"
        ),
    ] = None,
    agent: Annotated[str | None, Query(max_length=128)] = None,
    session_id: Annotated[str | None, Query(alias="sessionId", pattern=ID_PATTERN)] = None,
    batch_id: Annotated[str | None, Query(alias="batchId", pattern=ID_PATTERN)] = None,
    metadata: Annotated[
        list[str] | None, Query(max_length=8, description="key=value; repeat for several")
    ] = None,
    created_after: Annotated[
        Ms, Query(alias="createdAfter", ge=0, lt=10**limits.MAX_MS_DIGITS, description="ms, exclusive")
    ] = None,
    created_before: Annotated[
        Ms, Query(alias="createdBefore", ge=0, lt=10**limits.MAX_MS_DIGITS, description="ms, exclusive")
    ] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
    parent_run_id: Annotated[
        str | None, Query(alias="parentRunId", pattern=ID_PATTERN, description="only this run's child runs")
    ] = None,
) -> dict[str, Any]:
    flt = RunFilter(status, agent, session_id, batch_id, tuple(metadata or ()), created_after, created_before,
                    parent_run_id)  # fmt: skip
    return await _page(api, tenant, flt, limit, cursor)


async def _batch_or_404(api: Any, tenant: str, batch_id: str) -> dict[str, Any]:
    found = await Catalog(api.producer).batch(tenant, batch_id)
    if found is None:
        raise not_found("batch", batch_id)
    return found


@router.get("/v1/batches/{batch_id}", response_model=BatchView, responses=_404, summary="A batch's progress")
async def get_batch(batch_id: str, api: ApiDep, tenant: Tenant) -> dict[str, Any]:
    return await _batch_or_404(api, tenant, batch_id)


@router.get(
    "/v1/batches/{batch_id}/runs",
    response_model=RunsPage,
    responses={**_400, **_404},
    summary="A batch's runs, newest first",
)
async def batch_runs(
    batch_id: str,
    api: ApiDep,
    tenant: Tenant,
    status: Annotated[str | None, Query()] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    await _batch_or_404(api, tenant, batch_id)
    return await _page(api, tenant, RunFilter(status=status, batch_id=batch_id), limit, cursor)


@router.get(
    "/v1/batches/{batch_id}/results",
    response_class=StreamingResponse,
    responses={
        **_404,
        200: {
            "content": {"application/x-ndjson": {}},
            "description": "one JSON line per run in item order (agentmill_client.api.BatchResultLine)",
        },
    },
    summary="A batch's results as JSON lines, in item order",
)
async def batch_results(
    batch_id: str,
    api: ApiDep,
    tenant: Tenant,
    status: Annotated[
        str | None, Query(max_length=200, description="keep these statuses only: a comma list")
    ] = None,
) -> StreamingResponse:
    statuses = parse_statuses(status)  # ListingError: 422
    await _batch_or_404(api, tenant, batch_id)
    lines = export(api.producer, tenant, batch_id, statuses)
    first = await anext(lines, b"")  # Redis or the archive unreachable: a 503 before the answer starts

    async def body() -> AsyncIterator[bytes]:
        yield first
        async for chunk in lines:
            yield chunk

    return StreamingResponse(body(), media_type="application/x-ndjson")


@router.post(
    "/v1/batches/{batch_id}/abort",
    response_model=BatchAbortAnswer,
    responses=_404,
    summary="Abort a batch's runs",
)
async def abort_batch(batch_id: str, api: ApiDep, tenant: Tenant, request: Request) -> dict[str, Any]:
    await _batch_or_404(api, tenant, batch_id)
    verdicts = await Catalog(api.producer).abort_batch(
        tenant, batch_id, f"batch {batch_id} aborted by request", event_actor(request)
    )
    await audited(api, request, Action.BATCH_ABORT, batch_id)
    return {"batchId": batch_id, **verdicts}
