"""Managed API keys in Redis (shared/api_keys.py for what a key is): create one (its keyed hash
stored, the key handed out once), list a tenant's, revoke one, and look one up by its id (one round
trip, what each API process does at most once a second per key: producer/api/auth.py).

A key's hash lives at its id's home partition, the tenant's index of keys at the tenant's home
(keys.Partition.api_key, api_keys). A revoked or expired key's hash stays ``KEPT_S`` for listings
(and for the answer ``key_revoked`` / ``key_expired``), then expires.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from shared import api_keys
from shared.api_keys import Scope
from shared.fields import ApiKeyField as K
from shared.script_sending import Parts
from shared.settings import Settings

__all__ = ["KEPT_S", "KeyRecord", "KeyStore", "TooManyKeysError"]

KEPT_S = 30 * 86400  # a revoked or expired key's hash is kept this long after, then expires


class TooManyKeysError(Exception):
    """The tenant holds AGENTMILL_MAX_KEYS_PER_TENANT keys already."""


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _ms(v: str) -> int | None:
    return int(v) if v.isdigit() else None


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A key's hash as read back (never the key)."""

    key_id: str
    tenant: str
    name: str
    scopes: frozenset[Scope]
    digest: str
    created_at: int
    created_by: str
    expires_at: int | None
    revoked_at: int | None
    last_used_at: int | None

    @classmethod
    def of(cls, key_id: str, raw: dict[Any, Any]) -> KeyRecord | None:
        h = {_text(k): _text(v) for k, v in raw.items()}
        if not h.get(K.DIGEST) or not h.get(K.TENANT):
            return None
        scopes = frozenset(Scope(s) for s in h.get(K.SCOPES, "").split(",") if s in api_keys.ALL_SCOPES)
        return cls(
            key_id, h[K.TENANT], h.get(K.NAME, ""), scopes, h[K.DIGEST], _ms(h.get(K.CREATED_AT, "")) or 0,
            h.get(K.CREATED_BY, ""), _ms(h.get(K.EXPIRES_AT, "")), _ms(h.get(K.REVOKED_AT, "")),
            _ms(h.get(K.LAST_USED_AT, "")),
        )  # fmt: skip

    def view(self) -> dict[str, Any]:
        """The wire's KeyView (camelCase)."""
        return {
            "keyId": self.key_id, "tenant": self.tenant, "name": self.name,
            "scopes": sorted(s.value for s in self.scopes), "createdAt": self.created_at,
            "createdBy": self.created_by, "expiresAt": self.expires_at, "revokedAt": self.revoked_at,
            "lastUsedAt": self.last_used_at,
        }  # fmt: skip


class KeyStore:
    """A pool's managed API keys (``parts``: its partitions; the settings' key secret)."""

    def __init__(self, parts: Parts, settings: Settings) -> None:
        self.parts = parts
        self.secret = api_keys.key_secret(settings)
        self.max_keys = settings.max_keys_per_tenant

    async def create(
        self,
        tenant: str,
        scopes: Collection[Scope],
        *,
        name: str = "",
        expires_in_s: int | None = None,
        created_by: str = "",
    ) -> tuple[KeyRecord, str]:
        """A new key for ``tenant``: its record and the key (shown this once). TooManyKeysError past
        the tenant's limit."""
        index_part = self.parts.home(tenant)
        index = index_part.api_keys(tenant)

        async def count(c: Any) -> int:
            return int(await c.zcard(index))

        if await self.parts.call(index_part, count) >= self.max_keys:
            raise TooManyKeysError(f"tenant {tenant} holds {self.max_keys} keys (revoke some first)")
        key_id, part, key = api_keys.mint_key()
        now = int(time.time() * 1000)
        expires = now + expires_in_s * 1000 if expires_in_s else None
        fields = {
            K.TENANT: tenant, K.NAME: name, K.SCOPES: ",".join(sorted(s.value for s in scopes)),
            K.DIGEST: api_keys.digest(self.secret, part), K.CREATED_AT: now, K.CREATED_BY: created_by,
            K.EXPIRES_AT: expires or "", K.REVOKED_AT: "", K.LAST_USED_AT: "",
        }  # fmt: skip
        home = self.parts.home(key_id)

        def write_key(pipe: Any) -> None:
            pipe.hset(home.api_key(key_id), mapping=fields)
            if expires:
                pipe.pexpireat(home.api_key(key_id), expires + KEPT_S * 1000)

        def write_index(pipe: Any) -> None:
            pipe.zadd(index, {key_id: now})

        await self.parts.pipelined([(home, write_key), (index_part, write_index)])
        rec = KeyRecord.of(key_id, fields)
        assert rec is not None
        return rec, key

    async def lookup(self, key_id: str) -> KeyRecord | None:
        """The key's record, or None (one round trip)."""
        home = self.parts.home(key_id)

        async def read(c: Any) -> dict[Any, Any]:
            return await c.hgetall(home.api_key(key_id))  # type: ignore[no-any-return]

        return KeyRecord.of(key_id, await self.parts.call(home, read))

    async def touch(self, key_id: str, now_ms: int) -> None:
        """Write the key's last use (the caller does it at most once a minute per key)."""
        home = self.parts.home(key_id)

        async def write(c: Any) -> None:
            await c.hset(home.api_key(key_id), K.LAST_USED_AT, now_ms)

        await self.parts.call(home, write)

    async def list(self, tenant: str) -> list[KeyRecord]:
        """The tenant's keys, oldest first (an index entry whose hash expired is dropped)."""
        index_part = self.parts.home(tenant)
        index = index_part.api_keys(tenant)

        async def ids(c: Any) -> list[Any]:
            return await c.zrange(index, 0, -1)  # type: ignore[no-any-return]

        key_ids = [_text(i) for i in await self.parts.call(index_part, ids)]
        if not key_ids:
            return []
        homes = [self.parts.home(i) for i in key_ids]

        def read(h: Any, i: str) -> Any:
            return lambda pipe: pipe.hgetall(h.api_key(i))

        replies = await self.parts.pipelined([(h, read(h, i)) for h, i in zip(homes, key_ids, strict=True)])
        out, gone = [], []
        for key_id, reply in zip(key_ids, replies, strict=True):
            rec = KeyRecord.of(key_id, reply[0]) if reply else None
            if rec is None or rec.tenant != tenant:
                gone.append(key_id)
            else:
                out.append(rec)
        if gone:

            async def prune(c: Any) -> None:
                await c.zrem(index, *gone)

            await self.parts.call(index_part, prune)
        return out

    async def revoke(self, tenant: str, key_id: str) -> str:
        """``revoked``, ``already_revoked``, or ``unknown`` (no such key of this tenant)."""
        rec = await self.lookup(key_id) if len(key_id) == 16 else None
        if rec is None or rec.tenant != tenant:
            return "unknown"
        if rec.revoked_at is not None:
            return "already_revoked"
        home = self.parts.home(key_id)
        now = int(time.time() * 1000)

        def write(pipe: Any) -> None:
            pipe.hset(home.api_key(key_id), K.REVOKED_AT, now)
            pipe.pexpire(home.api_key(key_id), KEPT_S * 1000)

        await self.parts.pipelined([(home, write)])
        return "revoked"
