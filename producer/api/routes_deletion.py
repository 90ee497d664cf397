"""Deletion: DELETE /v1/runs/{id} (a run and its sub-agents' runs), DELETE /v1/sessions/{id} (every
run of a session), POST /v1/deletions and GET /v1/deletions/{id} (every run whose metadata matches,
in the background). What goes and what stays: docs/operations.md#deletion."""

from __future__ import annotations

from fastapi import APIRouter, Request

from agentmill_client.api import DeletionBody, DeletionView, RunDeleted, SessionDeleted
from agentmill_client.errors import ApiError
from producer.api.audited import Action, audited
from producer.api.audited import actor_of as request_actor
from producer.api.errors import COMMON_ERRORS, ErrorResponse
from producer.api.state import Api, ApiDep, Tenant
from producer.deletion import ParentRunningError

__all__ = ["router"]

router = APIRouter()
_404 = {**COMMON_ERRORS, 404: {"model": ErrorResponse}}


def actor_of(api: Api, request: Request) -> str:
    """Who deletes, as the tombstone names it: the caller's key id, or ``token-file`` (the static
    token file's tokens are one actor), ``anonymous`` with auth off."""
    if api.auth.disabled:
        return "anonymous"
    return request_actor(request).id


@router.delete(
    "/v1/runs/{run_id}",
    response_model=RunDeleted,
    responses={**_404, 409: {"model": ErrorResponse}},
    summary="Delete a run, its sub-agents' runs and everything derived from them (a running run is aborted first)",
)
async def delete_run(run_id: str, api: ApiDep, tenant: Tenant, request: Request) -> RunDeleted:
    try:
        done = await api.deletions.eraser.delete_run(run_id, tenant, actor_of(api, request))
    except ParentRunningError as exc:
        raise ApiError(409, "parent_running", str(exc)) from None
    if done is None:
        raise ApiError(404, "unknown_run", f"no run {run_id}")
    if not done.already:
        await audited(api, request, Action.DELETE, run_id, f"runs={done.runs}")
    return RunDeleted(
        run_id=run_id,
        deleted_at=done.deleted_at,
        runs_deleted=done.runs,
        already_deleted=done.already,
        archive_pending=done.archive_pending,
    )


@router.delete(
    "/v1/sessions/{session_id}",
    response_model=SessionDeleted,
    responses=_404,
    summary="Delete every run of a session, and the session",
)
async def delete_session(session_id: str, api: ApiDep, tenant: Tenant, request: Request) -> SessionDeleted:
    n = await api.deletions.eraser.delete_session(session_id, tenant, actor_of(api, request))
    if n is None:
        raise ApiError(404, "unknown_session", f"no session {session_id}")
    await audited(api, request, Action.DELETE, f"session:{session_id}", f"runs={n}")
    return SessionDeleted(session_id=session_id, runs_deleted=n)


@router.post(
    "/v1/deletions",
    status_code=202,
    response_model=DeletionView,
    responses={**COMMON_ERRORS, 422: {"model": ErrorResponse}},
    summary="Delete every run whose metadata matches, in the background",
)
async def create_deletion(body: DeletionBody, api: ApiDep, tenant: Tenant, request: Request) -> DeletionView:
    try:
        view = await api.deletions.create(tenant, dict(body.metadata), actor_of(api, request))
    except ValueError as exc:
        raise ApiError(422, "invalid_input", str(exc)) from None
    terms = ",".join(f"{k}={v}" for k, v in sorted(body.metadata.items()))
    await audited(api, request, Action.DELETE, f"deletion:{view['deletionId']}", f"metadata {terms}"[:500])
    return DeletionView.model_validate(view)


@router.get(
    "/v1/deletions/{deletion_id}",
    response_model=DeletionView,
    responses=_404,
    summary="A deletion's progress",
)
async def get_deletion(deletion_id: str, api: ApiDep, tenant: Tenant) -> DeletionView:
    view = await api.deletions.get(tenant, deletion_id)
    if view is None:
        raise ApiError(404, "unknown_deletion", f"no deletion {deletion_id}")
    return DeletionView.model_validate(view)
