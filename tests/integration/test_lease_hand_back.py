"""A run that stops on its worker's passed lease deadline hands itself back at once.

The worker's beat is answered late (failpoint ``beat_reply_late``): Redis renewed its lease, but the
worker's own deadline passes while it waits, and its run, whose model call ends meanwhile, stops
without writing. The run hands itself back (release.lua, fenced by its epoch and the lease id it
ran under), so a second worker resumes it within moments. Without the hand-back it waits for the
lease keeper (blocked on the late reply) or for the lease to lapse in Redis and a sweep to find it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis

from shared.fields import RunField
from shared.scripts import text
from tests.integration.helpers import producer_for, script_run, wait_all
from tests.support.procs import WorkerProc
from tests.support.schema import K
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

# Sweeps far apart: a run left to them waits a long time, so the hand-back is what resumes it.
ENV = {"AGENTMILL_LEASE_MS": "3000", "AGENTMILL_HEARTBEAT_MS": "250", "AGENTMILL_RECONCILE_MS": "20000"}
MODEL_S = 4.0  # the first worker's model call: it ends past that worker's deadline


async def test_a_run_stopped_on_a_passed_lease_deadline_is_resumed_elsewhere_at_once(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    p = producer_for(redis, redis_url)
    late = WorkerProc(redis_url, env={**ENV, "AGENTMILL_WORKER_ID": "late", "AGENTMILL_FAILPOINTS": "beat_reply_late"},
                      log=tmp_path / "late.log")  # fmt: skip
    await asyncio.to_thread(late.start)  # the first worker of a session starts the fork server: seconds
    other: WorkerProc | None = None
    try:
        await until("the first worker's lease", lambda: redis.zscore(K.workers, "late"), 30, every=0.05)
        sub = await p.submit(script_run([{"text": "slow", "delayMs": int(MODEL_S * 1000)}]))
        run = K.run(sub.run_id)  # type: ignore[union-attr]

        async def epoch() -> int:
            return int(text(await redis.hget(run, RunField.EPOCH) or b"0"))  # type: ignore[misc]

        await until("the first worker to take the run", lambda: epoch(), 10, every=0.01)
        taken = time.monotonic()
        other = WorkerProc(redis_url, env={**ENV, "AGENTMILL_WORKER_ID": "other"}, log=tmp_path / "other.log")
        await asyncio.to_thread(other.start)
        await until("the second worker's lease", lambda: redis.zscore(K.workers, "other"), 30, every=0.05)

        async def resumed() -> bool:
            return await epoch() >= 2

        await until("the run to be taken again", resumed, 60, every=0.01)
        waited = time.monotonic() - taken - MODEL_S  # from the first worker's stop, about
        print(f"\nstopped on the passed deadline -> resumed elsewhere: {waited * 1000:.0f} ms")
        rec = (await wait_all(p, [sub.run_id], 30))[sub.run_id]  # type: ignore[union-attr]
        assert rec.status.value == "completed", rec.result
        assert waited < 2.0, waited  # the keeper answers 9 s late; the lapsed lease's sweeps 20 s apart
        crashes = await redis.hget(run, RunField.CRASHES)  # type: ignore[misc]
        assert int(text(crashes or b"0")) == 1  # counted as a lost attempt, as the reconciler counts one
    finally:
        late.kill()  # its keeper sleeps on the late reply: no graceful stop to wait for
        if other is not None:
            await asyncio.to_thread(other.stop, 10)


async def test_a_run_claimed_by_a_claim_whose_reply_was_lost_is_handed_back(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The claim ran in Redis and took the run under the worker's lease, but its reply never reached
    the worker (failpoint ``claim_reply_lost``, once; in life the connection dropped and the client
    sent the claim again): no job drives the run, its worker's lease is live, so no sweep frees it.
    The worker's own sweep finds it in its runs set on two sweeps in a row and hands it back."""
    p = producer_for(redis, redis_url)
    env = {**ENV, "AGENTMILL_LEASE_MS": "1500", "AGENTMILL_RECONCILE_MS": "300", "AGENTMILL_WORKER_ID": "w",
           "AGENTMILL_FAILPOINTS": "claim_reply_lost"}  # fmt: skip
    w = WorkerProc(redis_url, env=env, log=tmp_path / "w.log")
    await asyncio.to_thread(w.start)
    try:
        await until("the worker's lease", lambda: redis.zscore(K.workers, "w"), 30, every=0.05)
        sub = await p.submit(script_run([{"text": "done"}]))
        rec = (await wait_all(p, [sub.run_id], 20))[sub.run_id]  # type: ignore[union-attr]
        assert rec.status.value == "completed", rec.result
        crashes = await redis.hget(K.run(sub.run_id), RunField.CRASHES)  # type: ignore[union-attr,misc]
        assert int(text(crashes or b"0")) == 1  # a lost attempt, as the lapsed lease's sweep would count
        assert "runs held in Redis under its lease and by no job here" in (tmp_path / "w.log").read_text()
    finally:
        await asyncio.to_thread(w.stop, 10)
