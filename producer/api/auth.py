"""Bearer-token auth: every token belongs to a tenant; tokens compare in constant time."""

from __future__ import annotations

import hmac
import logging
from pathlib import Path

from shared.quotas import DEFAULT_TENANT
from shared.settings import Settings
from shared.tenants import parse_tokens

__all__ = ["OPEN_TENANT", "Authenticator", "parse_tokens"]

log = logging.getLogger("agentmill.api")
OPEN_TENANT = DEFAULT_TENANT


class Authenticator:
    def __init__(self, settings: Settings) -> None:
        self.disabled = settings.auth_disabled
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
            log.warning("no API tokens configured (AGENTMILL_API_TOKENS): every request will get 401")
        elif not settings.id_secret:
            log.warning(
                "AGENTMILL_ID_SECRET is not set: tenants' ids are kept under a public development key "
                "(`agentmill api` refuses to start so: shared.tenants.require_id_secret)"
            )

    def is_operator(self, tenant: str) -> bool:
        """May this tenant see the pool as a whole (every tenant's load)?"""
        return tenant in self.operators

    def tenant(self, authorization: str | None) -> str | None:
        """The caller's tenant, or None when the token is missing or wrong."""
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
