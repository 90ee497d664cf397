"""/v1/agents…: a tenant's agents kept through the API, in numbered immutable versions
(producer.agents, answered by producer.agent_views): create a version, read them, roll the current
version back or forward, ramp a version over a share of new runs, delete. The operator's profiles
are listed beside them, read-only. Every route answers within the caller's tenant only: another
tenant's agent is a 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request

from agentmill_client.agents import AgentPointer, AgentsPage, AgentVersionView, AgentView
from producer.admission import check_enabled
from producer.agent_views import AgentViews
from producer.api.audited import Action, audited
from producer.api.errors import COMMON_ERRORS, NOT_FOUND, ErrorResponse
from producer.api.state import Api, ApiDep, Tenant

__all__ = ["router"]

router = APIRouter()
_404 = {**COMMON_ERRORS, **NOT_FOUND}
_409: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "read_only: an operator's profile"}
}


def _views(api: Api, tenant: str) -> AgentViews:
    return AgentViews(api.producer.submitter.agents, api.producer.profiles, tenant)


@router.post(
    "/v1/agents",
    status_code=201,
    response_model=AgentVersionView,
    responses={**COMMON_ERRORS, 409: {"model": ErrorResponse, "description": "agents_full, versions_full"}},
    summary="Create an agent, or its next version",
)
async def create_agent(
    api: ApiDep,
    tenant: Tenant,
    request: Request,
    body: Annotated[
        dict[str, Any], Body(description="a profile as an AGENTMILL_PROFILES entry, with its name")
    ],
    current: Annotated[
        bool,
        Query(description="the new version becomes the current one (false: ramp it or point to it later)"),
    ] = True,
) -> AgentVersionView:
    quota = api.quotas.of(tenant)
    check_enabled(tenant, quota)
    made = await _views(api, tenant).create(body, current=current, max_priority=quota.max_priority)
    await audited(api, request, Action.AGENT_CREATE, made.name, f"version={made.version} current={current}")
    return made


@router.get("/v1/agents", response_model=AgentsPage, responses=COMMON_ERRORS, summary="List agents")
async def list_agents(api: ApiDep, tenant: Tenant) -> AgentsPage:
    return await _views(api, tenant).listing()


@router.get(
    "/v1/agents/{name}",
    response_model=AgentView,
    responses=_404,
    summary="An agent: its current version and profile, its versions, its ramp",
)
async def get_agent(name: str, api: ApiDep, tenant: Tenant) -> AgentView:
    return await _views(api, tenant).show(name)


@router.get(
    "/v1/agents/{name}/versions/{version}",
    response_model=AgentVersionView,
    responses=_404,
    summary="One version of an agent",
)
async def get_version(name: str, version: int, api: ApiDep, tenant: Tenant) -> AgentVersionView:
    return await _views(api, tenant).version(name, version)


@router.post(
    "/v1/agents/{name}/current",
    response_model=AgentView,
    responses={**_404, **_409},
    summary="Point new runs at a version (roll back or forward), or ramp one over a share of them",
)
async def point(name: str, body: AgentPointer, api: ApiDep, tenant: Tenant, request: Request) -> AgentView:
    given = "ramp" in body.model_fields_set
    view = await _views(api, tenant).point(name, body.version, body.ramp, ramp_given=given)
    await audited(api, request, Action.AGENT_POINT, name, _pointed(view))
    return view


def _pointed(view: AgentView) -> str:
    ramp = f" ramp={view.ramp.version}@{view.ramp.percent:g}%" if view.ramp else ""
    return f"current={view.current_version}{ramp}"


@router.delete(
    "/v1/agents/{name}",
    response_model=AgentView,
    responses={**_404, **_409},
    summary="Delete an agent: it takes no new runs; its running runs finish on their version",
)
async def delete_agent(name: str, api: ApiDep, tenant: Tenant, request: Request) -> AgentView:
    gone = await _views(api, tenant).delete(name)
    await audited(api, request, Action.AGENT_DELETE, name)
    return gone
