"""The API process's cache of managed keys (producer/api/key_cache.py): one read per key however
many requests arrive together, a new read once its entry is older than its life, a bounded size,
and last-used written at most once a minute."""

from __future__ import annotations

import asyncio

from producer.api import key_cache
from producer.api.key_cache import KeyCache
from producer.key_store import KeyRecord
from shared.api_keys import Scope


class Store:
    def __init__(self) -> None:
        self.reads: list[str] = []
        self.touched: list[str] = []

    async def lookup(self, key_id: str) -> KeyRecord | None:
        self.reads.append(key_id)
        await asyncio.sleep(0.01)
        if key_id.startswith("x"):
            return None
        return KeyRecord(key_id, "t", "", frozenset({Scope.READ}), "d", 1, "", None, None, None)

    async def touch(self, key_id: str, now_ms: int) -> None:
        self.touched.append(key_id)


async def test_one_read_for_requests_together_and_again_after_its_life() -> None:
    store = Store()
    cache = KeyCache(store, ttl_s=0.05)  # type: ignore[arg-type]
    got = await asyncio.gather(*(cache.get("k1") for _ in range(50)))
    assert store.reads == ["k1"] and all(r is got[0] for r in got)
    assert await cache.get("x-unknown") is None and await cache.get("x-unknown") is None
    assert store.reads == ["k1", "x-unknown"]
    await asyncio.sleep(0.06)
    await cache.get("k1")
    assert store.reads == ["k1", "x-unknown", "k1"]


async def test_bounded_and_last_use_written_once_a_minute() -> None:
    store = Store()
    cache = KeyCache(store)  # type: ignore[arg-type]
    setattr(key_cache, "MAX_ENTRIES", 10)  # noqa: B010
    try:
        for i in range(30):
            await cache.get(f"x{i}")
        assert len(cache._entries) == 10
    finally:
        setattr(key_cache, "MAX_ENTRIES", 10_000)  # noqa: B010
    rec = await cache.get("k2")
    assert rec is not None
    for _ in range(5):
        await cache.used(rec)
    assert store.touched == ["k2"]
