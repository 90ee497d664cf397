"""The clients' governance calls: ``client.keys.create/list/revoke`` (``/v1/keys``), ``audit(...)``
(``GET /v1/audit``) and ``read_token(run_id)`` (``POST /v1/runs/{id}/token``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentmill_client import _wire as wire
from agentmill_client.governance import (
    AuditPage,
    KeyCreated,
    KeysPage,
    KeyView,
    ReadTokenAnswer,
    RevokeAnswer,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["AsyncGovernanceCalls", "AsyncKeys", "GovernanceCalls", "Keys"]


def _key_body(
    scopes: Sequence[str], name: str, expires_in_s: int | None, tenant: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"scopes": list(scopes), "name": name}
    if expires_in_s is not None:
        body["expiresInS"] = expires_in_s
    if tenant is not None:
        body["tenant"] = tenant
    return body


def _tenant(tenant: str | None) -> dict[str, str]:
    return {"tenant": tenant} if tenant is not None else {}


class AsyncKeys:
    """``/v1/keys``: the caller's tenant's managed API keys (an admin key's; an operator's for ``tenant``)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def create(
        self,
        scopes: Sequence[str],
        *,
        name: str = "",
        expires_in_s: int | None = None,
        tenant: str | None = None,
    ) -> KeyCreated:
        """A new key; its ``key`` is shown this once."""
        body = _key_body(scopes, name, expires_in_s, tenant)
        return KeyCreated.model_validate(wire.check(await self.http.post("/v1/keys", json=body)))

    async def list(self, *, tenant: str | None = None) -> list[KeyView]:
        page = KeysPage.model_validate(wire.check(await self.http.get("/v1/keys", params=_tenant(tenant))))
        return page.keys

    async def revoke(self, key_id: str, *, tenant: str | None = None) -> RevokeAnswer:
        answer = wire.check(await self.http.delete(f"/v1/keys/{key_id}", params=_tenant(tenant)))
        return RevokeAnswer.model_validate(answer)


class AsyncGovernanceCalls:
    http: httpx.AsyncClient

    @property
    def keys(self) -> AsyncKeys:
        return AsyncKeys(self.http)

    async def audit(
        self,
        *,
        start: int | None = None,
        end: int | None = None,
        action: str | None = None,
        target: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> AuditPage:
        """A page of the tenant's audit log, oldest first (``start``/``end``: ms since the epoch);
        ``next`` of the answer is the ``cursor`` of the next page."""
        params: dict[str, Any] = {"limit": limit, **_tenant(tenant)}
        for name, value in (
            ("from", start),
            ("to", end),
            ("action", action),
            ("target", target),
            ("cursor", cursor),
        ):
            if value is not None:
                params[name] = value
        return AuditPage.model_validate(wire.check(await self.http.get("/v1/audit", params=params)))

    async def read_token(self, run_id: str, *, ttl_s: int = 600) -> ReadTokenAnswer:
        """A token that reads this run's events (``?token=`` on its events URL) for ``ttl_s`` seconds."""
        answer = wire.check(await self.http.post(f"/v1/runs/{run_id}/token", json={"ttlS": ttl_s}))
        return ReadTokenAnswer.model_validate(answer)


class Keys:
    """The blocking ``client.keys``."""

    def __init__(self, owner: GovernanceCalls) -> None:
        self._owner = owner

    def create(
        self,
        scopes: Sequence[str],
        *,
        name: str = "",
        expires_in_s: int | None = None,
        tenant: str | None = None,
    ) -> KeyCreated:
        keys = self._owner._async.keys
        return self._owner._run(keys.create(scopes, name=name, expires_in_s=expires_in_s, tenant=tenant))  # type: ignore[no-any-return]

    def list(self, *, tenant: str | None = None) -> list[KeyView]:
        return self._owner._run(self._owner._async.keys.list(tenant=tenant))  # type: ignore[no-any-return]

    def revoke(self, key_id: str, *, tenant: str | None = None) -> RevokeAnswer:
        return self._owner._run(self._owner._async.keys.revoke(key_id, tenant=tenant))  # type: ignore[no-any-return]


class GovernanceCalls:
    _async: AsyncGovernanceCalls

    def _run(self, coro: Any) -> Any:
        raise NotImplementedError

    @property
    def keys(self) -> Keys:
        return Keys(self)

    def audit(self, **query: Any) -> AuditPage:
        """As AsyncClient.audit (start, end, action, target, cursor, limit, tenant)."""
        return self._run(self._async.audit(**query))  # type: ignore[no-any-return]

    def read_token(self, run_id: str, *, ttl_s: int = 600) -> ReadTokenAnswer:
        return self._run(self._async.read_token(run_id, ttl_s=ttl_s))  # type: ignore[no-any-return]
