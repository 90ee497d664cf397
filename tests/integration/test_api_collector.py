"""The API's collector, settled once it is up (shared/gc_settle.py) as a worker's is: what start-up
built is frozen, so that a full collection, which an attacker's requests trigger by the objects they
allocate (a fork parses a 0.9 MB state into them), no longer walks the whole process inside one
turn of the loop that serves every tenant."""

from __future__ import annotations

import gc
import time

import httpx
import pytest

from shared.gc_settle import GC_THRESHOLDS
from tests.integration.api_support import api, settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

FULL_COLLECTION_CPU_S = 0.02  # measured here: about 3 ms settled, 130 ms unsettled


async def test_the_api_freezes_what_start_up_built_and_a_full_collection_is_short(redis_url: str) -> None:
    gc.unfreeze()  # as a fresh process: another test may have settled this one already
    gc.set_threshold(700, 10, 10)
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url) as c:
        for _ in range(200):
            if (await c.get("/readyz")).status_code == 200:
                break
            time.sleep(0.02)
        frozen, thresholds = gc.get_freeze_count(), gc.get_threshold()
        t0 = time.thread_time()
        gc.collect()
        took = time.thread_time() - t0
    assert frozen > 0 and thresholds == GC_THRESHOLDS
    assert took < FULL_COLLECTION_CPU_S, f"a full collection took {took * 1000:.0f} ms of CPU"
