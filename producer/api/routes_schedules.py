"""/v1/schedules…: create a tenant's cron schedules, read and list them, pause, resume and delete
them (producer.schedules; the firing itself is producer.schedules.firer's)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from agentmill_client.ids import new_run_id
from agentmill_client.schedules import ScheduleAnswer, ScheduleInput, SchedulesPage, ScheduleView
from producer.api.audited import Action, audited
from producer.api.errors import COMMON_ERRORS, NOT_FOUND, ErrorResponse, not_found
from producer.api.state import ApiDep, Tenant
from producer.schedules.store import MAX_SHOWN
from shared.calls.schedules import SchedulePauseVerdict

__all__ = ["router"]

router = APIRouter()
_404 = {**COMMON_ERRORS, **NOT_FOUND}


@router.post(
    "/v1/schedules",
    status_code=201,
    response_model=ScheduleView,
    responses={
        **COMMON_ERRORS,
        200: {"model": ScheduleView, "description": "the same schedule was created before"},
        403: {"model": ErrorResponse, "description": "tenant_disabled: the tenant's quota disables it"},
        409: {"model": ErrorResponse},
    },
    summary="Create a schedule",
)
async def create(
    body: ScheduleInput, api: ApiDep, tenant: Tenant, request: Request, response: Response
) -> ScheduleView:
    schedule_id = body.schedule_id or "sch_" + new_run_id()[4:]
    view, created = await api.schedules.create(body, tenant, schedule_id)
    if not created:
        response.status_code = 200
    else:
        await audited(api, request, Action.SCHEDULE_CREATE, schedule_id)
    return view


@router.get("/v1/schedules", response_model=SchedulesPage, responses=COMMON_ERRORS, summary="List schedules")
async def list_schedules(
    api: ApiDep, tenant: Tenant, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> SchedulesPage:
    views, more = await api.schedules.list(tenant, limit)
    return SchedulesPage(schedules=views, more=more)


@router.get(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleView,
    responses=_404,
    summary="A schedule and its next firing times",
)
async def get_schedule(
    schedule_id: str,
    api: ApiDep,
    tenant: Tenant,
    next_n: Annotated[int, Query(alias="next", ge=0, le=MAX_SHOWN)] = 5,
) -> ScheduleView:
    view = await api.schedules.get(schedule_id, tenant, next_n)
    if view is None:
        raise not_found("schedule", schedule_id)
    return view


@router.delete(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleAnswer,
    responses=_404,
    summary="Delete a schedule (the runs it made stay)",
)
async def delete(schedule_id: str, api: ApiDep, tenant: Tenant, request: Request) -> ScheduleAnswer:
    if not await api.schedules.delete(schedule_id, tenant):
        raise not_found("schedule", schedule_id)
    await audited(api, request, Action.SCHEDULE_DELETE, schedule_id)
    return ScheduleAnswer(schedule_id=schedule_id, result="deleted")


async def _pause(
    schedule_id: str, api: ApiDep, tenant: str, request: Request, paused: bool
) -> ScheduleAnswer:
    verdict = await api.schedules.pause(schedule_id, tenant, paused)
    if verdict is SchedulePauseVerdict.UNKNOWN:
        raise not_found("schedule", schedule_id)
    await audited(api, request, Action.SCHEDULE_PAUSE if paused else Action.SCHEDULE_RESUME, schedule_id)
    return ScheduleAnswer(schedule_id=schedule_id, result=verdict)


@router.post(
    "/v1/schedules/{schedule_id}/pause",
    response_model=ScheduleAnswer,
    responses=_404,
    summary="Pause a schedule: no firing until it is resumed",
)
async def pause(schedule_id: str, api: ApiDep, tenant: Tenant, request: Request) -> ScheduleAnswer:
    return await _pause(schedule_id, api, tenant, request, True)


@router.post(
    "/v1/schedules/{schedule_id}/resume",
    response_model=ScheduleAnswer,
    responses=_404,
    summary="Resume a schedule from its next firing after now (the firings missed while paused are not made)",
)
async def resume(schedule_id: str, api: ApiDep, tenant: Tenant, request: Request) -> ScheduleAnswer:
    return await _pause(schedule_id, api, tenant, request, False)
