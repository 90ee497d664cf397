"""GET /v1/usage: the tenant's usage by UTC day and agent (tokens in and out, cost, runs)."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Query

from agentmill_client.errors import ApiError
from agentmill_client.usage import UsageAnswer
from producer.api.errors import COMMON_ERRORS
from producer.api.state import ApiDep, Tenant
from producer.usage import MAX_USAGE_DAYS, read_usage, usage_range

__all__ = ["router", "usage"]

router = APIRouter()


@router.get(
    "/v1/usage",
    response_model=UsageAnswer,
    response_model_by_alias=True,
    responses=COMMON_ERRORS,
    summary=f"The tenant's usage by UTC day and agent (at most {MAX_USAGE_DAYS} days)",
)
async def usage(
    api: ApiDep,
    tenant: Tenant,
    from_: str | None = Query(
        default=None, alias="from", description="first UTC day, YYYY-MM-DD (default: 29 days before `to`)"
    ),
    to: str | None = Query(default=None, description="last UTC day, YYYY-MM-DD (default: today)"),
) -> UsageAnswer:
    try:
        first, last = usage_range(from_, to, dt.datetime.now(dt.UTC).date())
    except ValueError as exc:
        raise ApiError(422, "invalid_range", str(exc)) from None
    return await read_usage(api.parts, tenant, first, last)
