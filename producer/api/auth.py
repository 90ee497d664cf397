"""Who calls: a bearer token of the token file (AGENTMILL_API_TOKENS, AGENTMILL_API_TOKENS_FILE: the
bootstrap, every scope of its tenant) or a managed API key (shared/api_keys.py, kept in Redis:
producer/key_store.py, checked through producer/api/key_cache.py). Tokens compare in constant time;
a managed key's secret is compared by its keyed hash, in constant time too."""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from agentmill_client.errors import ApiError
from producer.api.key_cache import KeyCache
from shared import api_keys
from shared.api_keys import ALL_SCOPES, Scope
from shared.quotas import DEFAULT_TENANT
from shared.settings import Settings
from shared.tenants import parse_tokens

__all__ = ["OPEN_TENANT", "TOKEN_FILE", "Authenticator", "Caller", "parse_tokens"]

log = logging.getLogger("agentmill.api")
OPEN_TENANT = DEFAULT_TENANT
TOKEN_FILE = "token-file"  # the actor of a token-file token in the audit log
_BEARER = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller: its tenant, what it may do, and who it is in the audit log."""

    tenant: str
    scopes: frozenset[Scope]
    actor: str  # a key id, or token-file
    actor_name: str = ""
    operator: bool = False  # may act on every tenant's keys and audit log
    expires_at: int | None = None  # a managed key's expiry (ms since the epoch): what it makes ends by then

    def require(self, scope: Scope | None) -> None:
        """403 ``scope_required`` naming the scope this caller lacks."""
        if scope is None or scope in self.scopes or (scope is Scope.ADMIN and self.operator):
            return
        raise ApiError(403, "scope_required", f"this route needs a key with the scope {scope.value}")


def unauthorized(code: str = "unauthorized", message: str = "a valid bearer token is required") -> ApiError:
    return ApiError(401, code, message, headers=_BEARER)


class Authenticator:
    def __init__(self, settings: Settings, keys: KeyCache | None = None) -> None:
        self.disabled = settings.auth_disabled
        self.keys = keys
        tokens = parse_tokens(settings.api_tokens or "")
        if settings.api_tokens_file:
            tokens.update(parse_tokens(Path(settings.api_tokens_file).read_text()))
        self.tokens = [(t.encode(), tenant) for t, tenant in tokens.items() if t]
        self.operators = {t.strip() for t in settings.operator_tenants.split(",") if t.strip()}
        if self.disabled:
            self.operators.add(OPEN_TENANT)
        if self.disabled:
            log.warning(
                "API authentication is OFF (AGENTMILL_AUTH_DISABLED): every caller is tenant %r", OPEN_TENANT
            )
        elif not self.tokens:
            log.warning(
                "no API tokens configured (AGENTMILL_API_TOKENS): only managed keys (agentmill keys create) "
                "are let in"
            )
        elif not settings.id_secret:
            log.warning(
                "AGENTMILL_ID_SECRET is not set: tenants' ids are kept under a public development key "
                "(`agentmill api` refuses to start so: shared.tenants.require_id_secret)"
            )

    def is_operator(self, tenant: str) -> bool:
        """May this tenant see the pool as a whole (every tenant's load)?"""
        return tenant in self.operators

    def tenant(self, authorization: str | None) -> str | None:
        """The tenant of a token-file token, or None when the token is missing or not one."""
        if self.disabled:
            return OPEN_TENANT
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        given = authorization[7:].strip().encode()
        found = None
        for token, tenant in self.tokens:  # compare with every token, so timing says nothing
            if hmac.compare_digest(given, token):
                found = tenant
        return found

    async def caller(self, authorization: str | None) -> Caller:
        """The caller, or 401: ``unauthorized`` (no or an unknown token), ``key_revoked``,
        ``key_expired``."""
        if self.disabled:
            return Caller(OPEN_TENANT, ALL_SCOPES, "auth-off", operator=True)
        tenant = self.tenant(authorization)
        if tenant is not None:
            return Caller(
                tenant, ALL_SCOPES - {Scope.OPERATOR}, TOKEN_FILE, operator=self.is_operator(tenant)
            )
        assert authorization is None or isinstance(authorization, str)
        given = (
            authorization[7:].strip() if authorization and authorization.lower().startswith("bearer ") else ""
        )
        parsed = api_keys.parse_key(given)
        if parsed is None or self.keys is None:
            raise unauthorized()
        key_id, part = parsed
        rec = await self.keys.get(key_id)
        if rec is None or not hmac.compare_digest(
            api_keys.digest(self.keys.store.secret, part).encode(), rec.digest.encode()
        ):
            raise unauthorized()
        if rec.revoked_at is not None:
            raise unauthorized("key_revoked", f"the API key {key_id} was revoked")
        if rec.expires_at is not None and rec.expires_at <= time.time() * 1000:
            raise unauthorized("key_expired", f"the API key {key_id} has expired")
        await self.keys.used(rec)
        return Caller(
            rec.tenant, rec.scopes, key_id, rec.name, operator=Scope.OPERATOR in rec.scopes,
            expires_at=rec.expires_at,
        )  # fmt: skip
