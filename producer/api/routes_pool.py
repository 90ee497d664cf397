"""GET /v1/pool: the pool as a whole, for operators (AGENTMILL_OPERATOR_TENANTS) only: it shows
every tenant's load, so a tenant's own token is refused with 403. GET /v1/me: the caller's tenant
and whether it is an operator, so the console offers the pool page only to those it answers."""

from __future__ import annotations

import time

from fastapi import APIRouter

from agentmill_client.api import CallerView
from agentmill_client.errors import ApiError
from agentmill_client.pool import PoolAnswer
from producer.api.errors import COMMON_ERRORS, ErrorResponse
from producer.api.state import ApiDep, CallerDep, Tenant
from producer.pool import read_pool

__all__ = ["me", "pool", "router"]

router = APIRouter()


@router.get(
    "/v1/pool",
    response_model=PoolAnswer,
    responses={**COMMON_ERRORS, 403: {"model": ErrorResponse}},
    summary="Workers, queues and runs per minute over the last hour (operators only)",
)
async def pool(api: ApiDep, tenant: Tenant) -> PoolAnswer:
    if not api.auth.is_operator(tenant):
        raise ApiError(
            403, "not_operator", "the pool view is for operator tenants (AGENTMILL_OPERATOR_TENANTS)"
        )
    return await read_pool(api.parts, now_ms=int(time.time() * 1000), lease_ms=api.settings.lease_ms)


@router.get(
    "/v1/me",
    response_model=CallerView,
    responses=COMMON_ERRORS,
    summary="The caller's tenant, and whether it is an operator (may read the pool)",
)
async def me(api: ApiDep, caller: CallerDep) -> CallerView:
    return CallerView(
        tenant=caller.tenant,
        operator=api.auth.is_operator(caller.tenant),
        scopes=sorted(s.value for s in caller.scopes),
        actor=caller.actor,
    )
