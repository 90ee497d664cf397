"""Each API process's cache of managed keys' records: a key is read from Redis at most once per
``TTL_S`` per process (one round trip, shared by the requests that arrive meanwhile), so a key
revoked or expired is refused by every process within ``TTL_S`` plus a read, without a restart.
Its last use is written at most once a minute per key and process. Bounded: ``MAX_ENTRIES`` keys
(unknown key ids included, so random ids cannot grow it), the oldest dropped first."""

from __future__ import annotations

import asyncio
import time

from producer.key_store import KeyRecord, KeyStore

__all__ = ["MAX_ENTRIES", "TOUCH_EVERY_S", "TTL_S", "KeyCache"]

TTL_S = 0.5  # a record read from Redis is used this long: revocation reaches every process within ~1 s
TOUCH_EVERY_S = 60.0
MAX_ENTRIES = 10_000


class KeyCache:
    def __init__(self, store: KeyStore, *, ttl_s: float = TTL_S) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, asyncio.Future[KeyRecord | None]]] = {}
        self._touched: dict[str, float] = {}
        self.reads = 0  # Redis reads made (tests, the bench)

    async def get(self, key_id: str) -> KeyRecord | None:
        now = time.monotonic()
        found = self._entries.get(key_id)
        if found is not None and now - found[0] < self.ttl_s:
            return await asyncio.shield(found[1])
        fut: asyncio.Future[KeyRecord | None] = asyncio.get_running_loop().create_future()
        self._entries.pop(key_id, None)
        self._entries[key_id] = (now, fut)
        while len(self._entries) > MAX_ENTRIES:
            del self._entries[next(iter(self._entries))]
        self.reads += 1
        try:
            rec = await self.store.lookup(key_id)
        except BaseException as exc:
            self._entries.pop(key_id, None)
            fut.set_exception(exc)
            fut.exception()  # retrieved: the waiters (if any) get it; none is no "never retrieved"
            raise
        fut.set_result(rec)
        return rec

    async def used(self, rec: KeyRecord) -> None:
        """Note a use of an accepted key: its lastUsedAt is written when a minute has passed since
        this process last wrote it (and it is not already that recent in Redis)."""
        now = time.monotonic()
        if now - self._touched.get(rec.key_id, -TOUCH_EVERY_S) < TOUCH_EVERY_S:
            return
        self._touched[rec.key_id] = now
        while len(self._touched) > MAX_ENTRIES:
            del self._touched[next(iter(self._touched))]
        wall = int(time.time() * 1000)
        if rec.last_used_at is not None and wall - rec.last_used_at < TOUCH_EVERY_S * 1000:
            return
        await self.store.touch(rec.key_id, wall)
