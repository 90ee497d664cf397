"""/v1/runs… and /v1/sessions…: submit runs (one or a batch), read and wait for them, abort them,
decide their approvals and post their client tool results."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import BaseModel, Field

from agentmill_client import limits
from agentmill_client.api import (
    AbortAnswer,
    Accepted,
    ApprovalsAnswer,
    ApprovalVerdict,
    BatchAnswer,
    RunView,
    SessionView,
    ToolResultsAnswer,
    ToolResultsBody,
    ToolResultVerdict,
)
from agentmill_client.errors import ApiError
from agentmill_client.ids import ID_PATTERN, new_batch_id
from agentmill_client.models import ApprovalDecision, RunInput
from producer.api.audited import Action, audit_command, audited, event_actor
from producer.api.errors import COMMON_ERRORS, ErrorResponse, OrjsonResponse
from producer.api.state import ApiDep, Tenant, record_or_404
from producer.service import SubmissionError, Submitted
from shared.loop import unless_closing

__all__ = ["QUOTA_CODES", "ApprovalsBody", "BatchBody", "router", "run_links"]

QUOTA_CODES = ("quota_exceeded", "rate_limited", "budget_exhausted", "tenant_disabled")
router = APIRouter()


# ---- bodies and answers (documented in OpenAPI) ----


class BatchBody(BaseModel):
    runs: list[dict[str, Any]] = Field(
        description="RunInput objects; each is validated on its own; at most AGENTMILL_MAX_BATCH of them"
    )
    webhook: str | None = Field(
        default=None, description="applies to items without their own webhook", pattern=r"^https?://"
    )
    batchId: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="names the batch (generated when absent); items without a runId get one derived from "
        "(batchId, offset + index), so sending the same batch again creates nothing new",
    )
    offset: int = Field(
        default=0,
        ge=0,
        le=limits.MAX_BATCH_OFFSET,
        strict=True,
        description="index of the first item, for a batch sent in parts",
    )
    batchWebhook: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://",
        description="POSTed the batch's counters once, when it has finished",
    )
    more: bool = Field(
        default=False,
        description="more parts of this batch follow: it cannot finish before a part without more arrives "
        "(then, once all its runs ended, it is finished, fires its batchWebhook once, and takes no new runs)",
    )


class ApprovalsBody(BaseModel):
    decisions: list[ApprovalDecision] = Field(min_length=1, max_length=256)


def _link(path: str, method: str, **parameters: str) -> dict[str, Any]:
    """An OpenAPI link to another operation (clients and the stateful fuzzer follow them)."""
    return {"operationRef": "#/paths/" + path.replace("/", "~1") + "/" + method, "parameters": parameters}


def run_links(run_id: str) -> dict[str, Any]:
    """Links from an answer naming a run to what can be done with that run."""
    return {
        "GetRun": _link("/v1/runs/{run_id}", "get", run_id=run_id),
        "WaitRun": _link("/v1/runs/{run_id}/wait", "get", run_id=run_id),
        "RunEvents": _link("/v1/runs/{run_id}/events", "get", run_id=run_id),
        "AbortRun": _link("/v1/runs/{run_id}/abort", "post", run_id=run_id),
        "DecideApprovals": _link("/v1/runs/{run_id}/approvals", "post", run_id=run_id),
    }


@router.post(
    "/v1/runs",
    status_code=202,
    response_model=Accepted,
    responses={
        **COMMON_ERRORS,
        202: {"links": run_links("$response.body#/runId")},
        200: {
            "model": Accepted,
            "description": "the same run was submitted before",
            "links": run_links("$response.body#/runId"),
        },
        404: {"model": ErrorResponse},
        409: {"model": ErrorResponse},
        413: {"model": ErrorResponse},
        403: {"model": ErrorResponse, "description": "tenant_disabled: the tenant's quota disables it"},
        429: {"model": ErrorResponse},
    },
    summary="Submit one run",
)
async def submit(
    body: RunInput,
    api: ApiDep,
    tenant: Tenant,
    request: Request,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
    traceparent: Annotated[str | None, Header()] = None,
    tracestate: Annotated[str | None, Header()] = None,
) -> Accepted:
    await api.admit()
    try:
        sub = await api.producer.submit(
            body, tenant=tenant, idempotency_key=idempotency_key, quota=api.quotas.of(tenant),
            trace=api.trace(traceparent, tracestate), audit=audit_command(api, request, Action.SUBMIT),
        )  # fmt: skip
    except SubmissionError:
        api.metrics.submitted("rejected")
        raise
    api.metrics.submitted("accepted" if sub.created else "replayed")
    if not sub.created:
        response.status_code = 200
    return Accepted(run_id=sub.run_id, status=sub.status, events_url=f"/v1/runs/{sub.run_id}/events")


@router.post(
    "/v1/runs/batch",
    response_model=BatchAnswer,
    response_model_exclude_none=True,  # an item is {runId, status} or {error: {code, message[, field]}}
    responses={
        **COMMON_ERRORS,
        200: {"links": run_links("$response.body#/results/0/runId")},
        413: {"model": ErrorResponse},
        403: {"model": ErrorResponse, "description": "tenant_disabled: the tenant's quota disables it"},
        429: {"model": ErrorResponse},
    },
    summary="Submit many runs",
)
async def submit_batch(
    body: BatchBody,
    api: ApiDep,
    tenant: Tenant,
    request: Request,
    traceparent: Annotated[str | None, Header()] = None,
    tracestate: Annotated[str | None, Header()] = None,
) -> Response:
    api.producer.check_batch_size(len(body.runs))
    await api.admit(len(body.runs))
    items: list[Any] = []
    for raw in body.runs:
        if body.webhook and isinstance(raw, dict) and not raw.get("webhook"):
            raw = {**raw, "webhook": body.webhook}
        items.append(raw)
    batch_id = body.batchId or new_batch_id()
    results = await api.producer.submit_many(
        items, tenant=tenant, batch_id=batch_id, offset=body.offset, batch_webhook=body.batchWebhook,
        quota=api.quotas.of(tenant), more=body.more, trace=api.trace(traceparent, tracestate),
    )  # fmt: skip
    if not any(isinstance(r, Submitted) for r in results):  # refused whole by a quota: say so
        refused = next((r for r in results if isinstance(r, SubmissionError) and r.code in QUOTA_CODES), None)
        if refused is not None:
            raise ApiError(refused.status, refused.code, refused.message.partition(": ")[2],
                           headers={"Retry-After": str(refused.retry_after_s)} if refused.retry_after_s
                           else None)  # fmt: skip
    out: list[dict[str, Any]] = []
    for r in (
        results
    ):  # BatchItem's shape, built directly: validating 1,000 answers costs more than enqueueing them
        out.append(
            {"runId": r.run_id, "status": r.status} if isinstance(r, Submitted) else {"error": r.as_dict()}
        )
    created = sum(1 for r in results if isinstance(r, Submitted) and r.created)
    replayed = sum(1 for r in results if isinstance(r, Submitted)) - created
    api.metrics.submitted("accepted", created)
    api.metrics.submitted("replayed", replayed)
    api.metrics.submitted("rejected", len(results) - created - replayed)
    if created:
        await audited(api, request, Action.BATCH_CREATE, batch_id, f"{created} runs created")
    return OrjsonResponse({"results": out, "batchId": batch_id})


@router.get(
    "/v1/runs/{run_id}",
    response_model=RunView,
    responses={
        **COMMON_ERRORS,
        200: {
            "links": {
                "GetSession": _link(
                    "/v1/sessions/{session_id}", "get", session_id="$response.body#/sessionId"
                )
            }
        },
        404: {"model": ErrorResponse},
    },
    summary="A run's status and result",
)
async def get_run(
    run_id: str,
    api: ApiDep,
    tenant: Tenant,
    include: Annotated[
        Literal["input"] | None,
        Query(description="input: add the run's inputMessages and lane (what it was submitted with)"),
    ] = None,
) -> dict[str, Any]:
    rec = await record_or_404(api, run_id, tenant)
    view = rec.view()
    if include == "input" and (given := await api.producer.submitted_input(rec)) is not None:
        if isinstance(messages := given.get("inputMessages"), list):
            view["inputMessages"] = messages
        view["lane"] = "economy" if given.get("lane") == "economy" else "standard"
    if kids := await api.producer.children(rec):
        view["children"] = kids
    return view


@router.get(
    "/v1/runs/{run_id}/wait",
    response_model=RunView,
    responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}},
    summary="Long-poll until the run ends",
)
async def wait_run(
    run_id: str,
    api: ApiDep,
    tenant: Tenant,
    timeout_s: Annotated[float, Query(alias="timeout", ge=0, le=60)] = 30.0,
) -> dict[str, Any]:
    read = await record_or_404(api, run_id, tenant)
    with api.streams.acquire(tenant):
        waited, rec = await unless_closing(
            api.closing, api.producer.wait(run_id, timeout_s=timeout_s, tenant=tenant, read=read)
        )
    if not waited:  # shutting down: the run as it is now, as when the wait times out
        rec = await api.producer.get(run_id, tenant=tenant)
    if rec is None:
        raise ApiError(404, "unknown_run", f"no run {run_id}")
    return rec.as_seen_by(run_id).view()


@router.post(
    "/v1/runs/{run_id}/abort",
    response_model=AbortAnswer,
    responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}},
    summary="Abort a run",
)
async def abort(run_id: str, api: ApiDep, tenant: Tenant, request: Request) -> AbortAnswer:
    key = await api.producer.resolve(run_id, tenant)
    verdict = await api.producer.abort(key, tenant=tenant, actor=event_actor(request))
    if verdict == "unknown" and api.producer.archive is not None:  # gone from Redis, maybe archived
        verdict = "finished" if await api.producer.get(run_id, tenant=tenant) is not None else verdict
    if verdict == "unknown":
        raise ApiError(404, "unknown_run", f"no run {run_id}")
    if verdict in ("aborted", "requested"):
        await audited(api, request, Action.ABORT, run_id)
    return AbortAnswer(run_id=run_id, result=verdict)


@router.post(
    "/v1/runs/{run_id}/approvals",
    response_model=ApprovalsAnswer,
    responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}, 409: {"model": ErrorResponse}},
    summary="Approve or reject pending tool calls",
)
async def approvals(
    run_id: str, body: ApprovalsBody, api: ApiDep, tenant: Tenant, request: Request
) -> ApprovalsAnswer:
    out: list[ApprovalVerdict] = []
    resumed = False
    key = await api.producer.resolve(run_id, tenant)
    for d in body.decisions:
        verdict = await api.producer.settle_approval(
            key,
            d.tool_call_id,
            approved=d.approved,
            reason=d.reason,
            tenant=tenant,
            actor=event_actor(request),
        )
        if verdict == "unknown_run":
            raise ApiError(404, "unknown_run", f"no run {run_id}")
        if verdict == "unknown_call":
            raise ApiError(
                404, "unknown_tool_call", f"run {run_id} has no pending tool call {d.tool_call_id}"
            )
        if verdict == "already_decided":
            raise ApiError(409, "already_decided", f"tool call {d.tool_call_id} was already decided")
        if verdict == "not_awaiting":
            raise ApiError(409, "not_awaiting_approval", f"run {run_id} is not waiting for approval")
        resumed = resumed or verdict == "resumed"
        out.append(ApprovalVerdict(tool_call_id=d.tool_call_id, result=verdict))
        action = Action.APPROVE if d.approved else Action.REJECT
        await audited(api, request, action, run_id, f"toolCallId={d.tool_call_id}")
    return ApprovalsAnswer(run_id=run_id, results=out, resumed=resumed)


@router.post(
    "/v1/runs/{run_id}/tool-results",
    response_model=ToolResultsAnswer,
    responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}, 409: {"model": ErrorResponse}},
    summary="Post results of client tool calls (idempotent per toolCallId)",
)
async def tool_results(
    run_id: str, body: ToolResultsBody, api: ApiDep, tenant: Tenant, request: Request
) -> ToolResultsAnswer:
    key = await api.producer.resolve(run_id, tenant)
    verdict, call, each = await api.producer.post_tool_results(
        key, body.results, tenant=tenant, actor=event_actor(request)
    )
    if verdict in ("recorded", "resumed"):
        calls = ",".join(r.tool_call_id for r, v in zip(body.results, each, strict=True) if v == "recorded")
        if calls:
            await audited(api, request, Action.TOOL_RESULT, run_id, f"toolCallIds={calls}")
        out = [
            ToolResultVerdict(tool_call_id=r.tool_call_id, result=v)
            for r, v in zip(body.results, each, strict=True)
        ]
        return ToolResultsAnswer(run_id=run_id, results=out, resumed=verdict == "resumed")
    status, message = {
        "unknown_run": (404, f"no run {run_id}"),
        "unknown_call": (404, f"run {run_id} has no tool call {call}"),
        "not_client": (422, f"tool call {call} is not a client tool call: its worker executes it"),
        "finished": (409, f"run {run_id} has already finished"),
        "conflict": (409, f"tool call {call} already has a different result"),
        "timed_out": (409, f"tool call {call} passed its deadline; the model was given a timeout error"),
    }.get(verdict, (409, verdict))
    code = {
        "unknown_call": "unknown_tool_call",
        "not_client": "not_client_tool",
        "finished": "run_finished",
    }
    raise ApiError(status, code.get(verdict, verdict), message)


@router.get(
    "/v1/sessions/{session_id}",
    response_model=SessionView,
    responses={**COMMON_ERRORS, 404: {"model": ErrorResponse}},
    summary="A session's runs and history",
)
async def session(session_id: str, api: ApiDep, tenant: Tenant) -> dict[str, Any]:
    found = await api.producer.get_session(session_id, tenant=tenant)
    if found is None:
        raise ApiError(404, "unknown_session", f"no session {session_id}")
    return found
