"""/v1/keys (the tenant's managed API keys: an ``admin`` key's, or an operator's for any tenant),
GET /v1/audit (the tenant's audit log) and POST /v1/runs/{id}/token (a read token of one run's
events, for a browser's EventSource or a third party)."""

from __future__ import annotations

import re
import time
import unicodedata
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from agentmill_client.errors import ApiError
from agentmill_client.governance import (
    AuditPage,
    KeyCreated,
    KeyInput,
    KeysPage,
    ReadTokenAnswer,
    ReadTokenBody,
    RevokeAnswer,
)
from producer import audit
from producer.api.audited import Action, audited
from producer.api.auth import Caller
from producer.api.errors import COMMON_ERRORS, NOT_FOUND, ErrorResponse, not_found
from producer.api.state import ApiDep, CallerDep, record_or_404
from producer.key_store import TooManyKeysError
from shared import api_keys
from shared.api_keys import ReadToken, Scope

__all__ = ["router"]

router = APIRouter()
_403 = {**COMMON_ERRORS, 403: {"model": ErrorResponse}}
_CURSOR = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")  # ASCII digits, no trailing newline: fullmatch
# Bidirectional embeddings, overrides, isolates and marks: a name shown to the operator (the CLI,
# the audit log) cannot reorder what is printed around it.
_BIDI = frozenset("\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ID_MAX = 2**64 - 1  # each part of a stream id; past it Redis refuses the range


def _is_cursor(cursor: str) -> bool:
    """An audit stream id as the API returns them: two decimal parts, each within 64 bits, short of
    the last id (the page after it is past the range Redis reads: no cursor this API returns)."""
    if _CURSOR.fullmatch(cursor) is None:
        return False
    ms, seq = (int(p) for p in cursor.split("-"))
    return max(ms, seq) <= _ID_MAX and (ms, seq) < (_ID_MAX, _ID_MAX)


def _tenant(caller: Caller, asked: str | None) -> str:
    """The tenant acted on: the caller's own, or another one an operator names."""
    if asked is None or asked == caller.tenant:
        return caller.tenant
    if not asked.strip() or any(unicodedata.category(ch) in ("Cc", "Cs") for ch in asked):
        raise ApiError(422, "invalid_input", "tenant: a tenant's name (not empty, no control characters)")
    if not caller.operator:
        raise ApiError(
            403, "operator_required", "only an operator may act on another tenant's keys and audit"
        )
    return asked


@router.post(
    "/v1/keys", status_code=201, response_model=KeyCreated, responses=_403, summary="Create an API key"
)
async def create_key(body: KeyInput, api: ApiDep, caller: CallerDep, request: Request) -> dict[str, Any]:
    tenant = _tenant(caller, body.tenant)
    # (a lone surrogate, which JSON's \u escapes can carry, cannot be stored as UTF-8 either)
    if any(unicodedata.category(ch) in ("Cc", "Cs") or ch in _BIDI for ch in body.name):
        raise ApiError(
            422, "invalid_input", "name: no control, surrogate or bidirectional formatting characters"
        )
    if caller.expires_at is not None:  # a key cannot outlive the key that makes it
        left_s = max(0, (caller.expires_at - int(time.time() * 1000)) // 1000)
        if body.expires_in_s is None or body.expires_in_s > left_s:
            raise ApiError(
                422,
                "invalid_input",
                f"expiresInS: at most {left_s}, the rest of the life of the key that makes it",
            )
    try:
        scopes = api_keys.parse_scopes(",".join(body.scopes))
    except ValueError as exc:
        raise ApiError(422, "invalid_input", str(exc)) from None
    if Scope.OPERATOR in scopes and not caller.operator:
        raise ApiError(403, "operator_required", "only an operator may grant the scope operator")
    lacking = sorted(s.value for s in scopes if s not in caller.scopes and s is not Scope.OPERATOR)
    if lacking:  # a key grants no more than it holds
        raise ApiError(403, "scope_required", f"this key does not hold the scope {', '.join(lacking)}: "
                       "a key grants only scopes it holds")  # fmt: skip
    try:
        rec, key = await api.keys.create(
            tenant, scopes, name=body.name, expires_in_s=body.expires_in_s, created_by=caller.actor
        )
    except TooManyKeysError as exc:
        raise ApiError(409, "too_many_keys", str(exc)) from None
    await audited(
        api, request, Action.KEY_CREATE, rec.key_id, f"tenant={tenant} scopes={','.join(body.scopes)}"
    )
    return {**rec.view(), "key": key}


@router.get("/v1/keys", response_model=KeysPage, responses=_403, summary="List API keys (never the keys)")
async def list_keys(
    api: ApiDep, caller: CallerDep, tenant: Annotated[str | None, Query(max_length=100)] = None
) -> dict[str, Any]:
    return {"keys": [r.view() for r in await api.keys.list(_tenant(caller, tenant))]}


@router.delete(
    "/v1/keys/{key_id}",
    response_model=RevokeAnswer,
    responses={**_403, **NOT_FOUND},
    summary="Revoke an API key",
)
async def revoke_key(
    key_id: str,
    api: ApiDep,
    caller: CallerDep,
    request: Request,
    tenant: Annotated[str | None, Query(max_length=100)] = None,
) -> RevokeAnswer:
    verdict = await api.keys.revoke(_tenant(caller, tenant), key_id)
    if verdict == "unknown":
        raise not_found("key", key_id)
    if verdict == "revoked":
        await audited(api, request, Action.KEY_REVOKE, key_id)
    return RevokeAnswer(key_id=key_id, result=verdict)


@router.get(
    "/v1/audit",
    response_model=AuditPage,
    responses={**_403, 400: {"model": ErrorResponse, "description": "invalid_cursor"}},
    summary="The tenant's audit log, oldest first",
)
async def read_audit(
    api: ApiDep,
    caller: CallerDep,
    from_ms: Annotated[
        int | None, Query(alias="from", ge=0, le=10**15, description="ms since the epoch")
    ] = None,
    to_ms: Annotated[int | None, Query(alias="to", ge=0, le=10**15, description="ms since the epoch")] = None,
    action: Annotated[str | None, Query(max_length=40)] = None,
    target: Annotated[str | None, Query(max_length=300)] = None,
    cursor: Annotated[str | None, Query(max_length=50)] = None,
    limit: Annotated[int, Query(ge=1, le=audit.MAX_PAGE)] = 100,
    tenant: Annotated[str | None, Query(max_length=100)] = None,
) -> dict[str, Any]:
    if cursor is not None and not _is_cursor(cursor):
        raise ApiError(400, "invalid_cursor", "cursor: not a cursor this API returned")
    if action is not None and action not in {a.value for a in Action}:
        raise ApiError(422, "invalid_input", f"action: one of {', '.join(a.value for a in Action)}")
    q = audit.AuditQuery(from_ms, to_ms, action, target, cursor, limit)
    archive = api.producer.archive.store if api.producer.archive is not None else None
    entries, nxt = await audit.read(api.parts, _tenant(caller, tenant), q, archive)
    return {"entries": entries, "next": nxt}


@router.post(
    "/v1/runs/{run_id}/token",
    response_model=ReadTokenAnswer,
    responses={**_403, **NOT_FOUND, 422: {"model": ErrorResponse}},
    summary="A token that reads this run's events (?token= on its events route) and nothing else",
)
async def read_token(
    run_id: str, api: ApiDep, caller: CallerDep, body: ReadTokenBody | None = None
) -> ReadTokenAnswer:
    ttl_s = (body or ReadTokenBody()).ttl_s
    if ttl_s > api.settings.read_token_max_ttl_s:
        raise ApiError(422, "invalid_input", f"ttlS: at most {api.settings.read_token_max_ttl_s}")
    await record_or_404(api, run_id, caller.tenant)
    expires = int(time.time() * 1000) + ttl_s * 1000
    token = api_keys.sign_read_token(api.keys.secret, ReadToken(run_id, caller.tenant, expires))
    return ReadTokenAnswer(
        token=token, run_id=run_id, expires_at=expires, events_url=f"/v1/runs/{run_id}/events?token={token}"
    )
