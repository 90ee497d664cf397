"""/v1/agents…: a tenant's agents kept through the API, in numbered immutable versions
(producer.agents): create a version, read them, roll the current version back or forward, ramp a
version over a share of new runs, delete. The operator's profiles are listed beside them,
read-only. Every route answers within the caller's tenant only: another tenant's agent is a 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query

from agentmill_client.agents import AgentPointer, AgentsPage, AgentVersionView, AgentView
from agentmill_client.errors import ApiError
from producer.admission import check_enabled
from producer.agent_choice import Pointers
from producer.api.errors import COMMON_ERRORS, NOT_FOUND, ErrorResponse, not_found
from producer.api.state import Api, ApiDep, Tenant
from producer.submission import SubmissionError
from shared.profiles import AgentProfile

__all__ = ["router"]

router = APIRouter()
_404 = {**COMMON_ERRORS, **NOT_FOUND}
_409: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "read_only: an operator's profile"}
}


def _operator(api: Api) -> dict[str, AgentProfile]:
    return dict(api.producer.profiles or {})


def _operator_view(profile: AgentProfile, *, full: bool) -> AgentView:
    shown = None
    if full:  # the provider as its kind and model: where it connects and with which key is the operator's
        shown = profile.model_dump(by_alias=True, exclude_none=True)
        shown["provider"] = {"kind": profile.provider.kind, "model": profile.provider.model_name}
    return AgentView(name=profile.name, source="operator", profile=shown)


def _view(name: str, p: Pointers, profile: dict[str, Any] | None = None) -> AgentView:
    return AgentView.model_validate({"name": name, "source": "tenant", **p.view(), "profile": profile})


def _read_only(name: str) -> ApiError:
    return ApiError(409, "read_only", f"{name!r} is an operator's profile: read-only through the API")


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
    agents = api.producer.submitter.agents
    name, version = await agents.create(tenant, body, make_current=current, max_priority=quota.max_priority)
    found = await agents.version(tenant, name, version)
    p = await agents.pointers(tenant, name, fresh=True)
    assert found is not None and p is not None
    return AgentVersionView(name=name, version=version, created_at=p.created[version - 1], profile=found[0])


@router.get("/v1/agents", response_model=AgentsPage, responses=COMMON_ERRORS, summary="List agents")
async def list_agents(api: ApiDep, tenant: Tenant) -> AgentsPage:
    mine = [_view(n, p) for n, p in await api.producer.submitter.agents.listing(tenant)]
    theirs = [_operator_view(p, full=False) for _, p in sorted(_operator(api).items())]
    return AgentsPage(agents=[*mine, *theirs])


@router.get(
    "/v1/agents/{name}",
    response_model=AgentView,
    responses=_404,
    summary="An agent: its current version and profile, its versions, its ramp",
)
async def get_agent(name: str, api: ApiDep, tenant: Tenant) -> AgentView:
    if (op := _operator(api).get(name)) is not None:
        return _operator_view(op, full=True)
    agents = api.producer.submitter.agents
    p = await agents.pointers(tenant, name, fresh=True)
    if p is None:
        raise not_found("agent", name)
    found = await agents.version(tenant, name, p.current) if p.current is not None else None
    return _view(name, p, found[0] if found is not None else None)


@router.get(
    "/v1/agents/{name}/versions/{version}",
    response_model=AgentVersionView,
    responses=_404,
    summary="One version of an agent",
)
async def get_version(name: str, version: int, api: ApiDep, tenant: Tenant) -> AgentVersionView:
    agents = api.producer.submitter.agents
    p = await agents.pointers(tenant, name, fresh=True)
    found = (
        await agents.version(tenant, name, version) if p is not None and 1 <= version <= p.latest else None
    )
    if p is None or found is None:
        raise not_found("agent version", f"{name}@{version}")
    return AgentVersionView(name=name, version=version, created_at=p.created[version - 1], profile=found[0])


@router.post(
    "/v1/agents/{name}/current",
    response_model=AgentView,
    responses={**_404, **_409},
    summary="Point new runs at a version (roll back or forward), or ramp one over a share of them",
)
async def point(name: str, body: AgentPointer, api: ApiDep, tenant: Tenant) -> AgentView:
    if name in _operator(api):
        raise _read_only(name)
    if body.version is None and "ramp" not in body.model_fields_set:
        raise SubmissionError("invalid_input", 'body: give "version", "ramp", or both', field="version")
    agents = api.producer.submitter.agents
    p: Pointers | None = None
    if body.version is not None:
        p = await agents.point(tenant, name, "current", body.version)
    if "ramp" in body.model_fields_set:
        r = body.ramp
        p = await agents.point(
            tenant, name, "ramp", None if r is None else r.version, 0.0 if r is None else r.percent
        )
    assert p is not None
    return _view(name, p)


@router.delete(
    "/v1/agents/{name}",
    response_model=AgentView,
    responses={**_404, **_409},
    summary="Delete an agent: it takes no new runs; its running runs finish on their version",
)
async def delete_agent(name: str, api: ApiDep, tenant: Tenant) -> AgentView:
    if name in _operator(api):
        raise _read_only(name)
    return _view(name, await api.producer.submitter.agents.point(tenant, name, "delete"))
