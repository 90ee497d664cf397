"""Retry and fork (producer/restore.py): POST /v1/runs/{id}/retry, /v1/runs/{id}/fork and
/v1/batches/{id}/retry. Within the caller's tenant only: another tenant's run or batch is a 404."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Request, Response

from agentmill_client.api import Accepted, BatchRetryAnswer, BatchRetryItem, ErrorBody, ForkBody, RetryBody
from producer.api.audited import Action, audited, event_actor
from producer.api.errors import COMMON_ERRORS, NOT_FOUND, ErrorResponse, not_found
from producer.api.routes_runs import run_links
from producer.api.state import Api, ApiDep, Tenant
from producer.listing import Catalog
from producer.restore import RETRYABLE
from producer.run_filter import ListingError
from producer.submission import SubmissionError, Submitted

__all__ = ["fork_run", "retry_batch", "retry_run", "router"]

router = APIRouter()
_ERRORS = {
    **COMMON_ERRORS,
    202: {"links": run_links("$response.body#/runId")},
    200: {"model": Accepted, "description": "the same Idempotency-Key made this run before"},
    404: {"model": ErrorResponse},
    403: {"model": ErrorResponse, "description": "tenant_disabled: the tenant's quota disables it"},
    409: {"model": ErrorResponse},
    429: {"model": ErrorResponse},
}


def _accepted(api: Api, sub: Submitted, response: Response) -> Accepted:
    """202 for a new run; 200 for the one the same Idempotency-Key created before."""
    api.metrics.submitted("accepted" if sub.created else "replayed")
    if not sub.created:
        response.status_code = 200
    return Accepted(run_id=sub.run_id, status=sub.status, events_url=f"/v1/runs/{sub.run_id}/events")


@router.post(
    "/v1/runs/{run_id}/retry", status_code=202, response_model=Accepted, responses=_ERRORS,
    summary="Retry a failed or aborted run from its last checkpoint (or from its input)",
)  # fmt: skip
async def retry_run(
    run_id: str,
    api: ApiDep,
    tenant: Tenant,
    request: Request,
    response: Response,
    body: Annotated[RetryBody | None, Body()] = None,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> Accepted:
    await api.admit()
    from_start = body is not None and body.from_ == "start"
    sub = await api.restorer().retry(
        run_id, tenant, from_start=from_start, quota=api.quotas.of(tenant), idempotency_key=idempotency_key,
        actor=event_actor(request),
    )  # fmt: skip
    if sub.created:
        await audited(api, request, Action.RETRY, run_id, f"retryRunId={sub.run_id}")
    return _accepted(api, sub, response)


@router.post(
    "/v1/runs/{run_id}/fork", status_code=202, response_model=Accepted, responses={**_ERRORS, 422: {"model": ErrorResponse}},
    summary="A new run from the state at one event seq of a run that ended",
)  # fmt: skip
async def fork_run(
    run_id: str,
    body: ForkBody,
    api: ApiDep,
    tenant: Tenant,
    request: Request,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> Accepted:
    await api.admit()
    sub = await api.restorer().fork(
        run_id,
        tenant,
        body.at_seq,
        body.input_messages,
        quota=api.quotas.of(tenant),
        idempotency_key=idempotency_key,
        agent=body.agent,
        actor=event_actor(request),
    )
    if sub.created:
        await audited(api, request, Action.FORK, run_id, f"forkRunId={sub.run_id} atSeq={body.at_seq}")
    return _accepted(api, sub, response)


@router.post(
    "/v1/batches/{batch_id}/retry", response_model=BatchRetryAnswer,
    responses={**COMMON_ERRORS, **NOT_FOUND},
    summary="Retry a batch's failed (or aborted) runs, each in its place in the batch",
)  # fmt: skip
async def retry_batch(
    batch_id: str,
    api: ApiDep,
    tenant: Tenant,
    request: Request,
    status: Annotated[str, Query(description="failed, aborted, or both as a comma list")] = "failed",
) -> BatchRetryAnswer:
    wanted = tuple(dict.fromkeys(s.strip() for s in status.split(",")))
    if not wanted or any(s not in {r.value for r in RETRYABLE} for s in wanted):
        raise ListingError("status", "failed, aborted, or both as a comma list")  # 422, field status
    if await Catalog(api.producer).batch(tenant, batch_id) is None:
        raise not_found("batch", batch_id)
    await api.admit()
    done = await api.restorer().retry_batch(
        batch_id, tenant, wanted, quota=api.quotas.of(tenant), actor=event_actor(request)
    )
    items = []
    for original, got in done:
        if isinstance(got, SubmissionError):
            items.append(BatchRetryItem(run_id=original, error=ErrorBody(**got.as_dict())))
        else:
            items.append(BatchRetryItem(run_id=original, retry_run_id=got.run_id))
    retried = sum(1 for i in items if i.retry_run_id)
    api.metrics.submitted("accepted", retried)
    if retried:
        await audited(api, request, Action.BATCH_RETRY, batch_id, f"{retried} runs retried")
    return BatchRetryAnswer(batch_id=batch_id, results=items)
