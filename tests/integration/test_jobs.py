"""The worker starts and finishes the arq jobs it claimed itself (worker/process/jobs.py, worker/process/finisher.py):
the runs are driven as before, arq's keys are cleared as arq clears them, arq reads the result."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest
from arq.jobs import Job, JobStatus
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from shared.dispatch import deserialize
from shared.partitions import Partitions
from shared.settings import Settings
from tests.integration.helpers import producer_for, running_worker, script_run, until_status, wait_all
from tests.support.schema import LAYOUT, K
from worker.process.arq_worker import START_CHUNK, run_agent
from worker.process.finisher import JobFinisher
from worker.process.jobs import GC_THRESHOLDS, WorkerProcess, claim_size

pytestmark = pytest.mark.integration


async def test_finished_jobs_leave_arq_keys_as_arq_does_and_share_round_trips(
    redis: Redis, redis_url: str
) -> None:
    """A job whose run ends with it is finished by the run's ending commit (JobEnding); a job that
    ends otherwise (its run parked for an approval) by the finisher, the jobs ending together in
    shared round trips. Either way arq reads the job as complete, with what it returned."""
    p = producer_for(redis, redis_url)
    ending = [script_run([{"text": "hi", "delayMs": 200}])] * 40
    parking = [
        script_run([{"toolCalls": [{"id": "t1", "name": "echo", "arguments": {}}]}, {"text": "ok"}],
                   toolPolicy={"requireApprovalByDefault": True})
    ] * 20  # fmt: skip
    ids = [s.run_id for s in await p.submit_many(ending)]
    parked = [s.run_id for s in await p.submit_many(parking)]
    async with running_worker(redis_url) as wp:
        recs = await wait_all(p, ids, 20)
        assert {r.status.value for r in recs.values()} == {"completed"}
        for rid in parked:
            await until_status(redis, rid, "awaiting_human")
        for _ in range(100):  # a parked run's job's keys go a moment after its commit
            if not await redis.keys("arq:in-progress:*"):
                break
            await asyncio.sleep(0.02)
        finisher = wp.worker.finisher
        assert finisher is not None and 1 <= finisher.batches < len(parked)  # finishes shared round trips
    assert await redis.zcard(K.queue) == 0
    for rid in ids + parked:
        jid = K.job_id(rid, 1)
        assert not await redis.exists(K.job_key(jid), K.in_progress_key(jid), f"arq:retry:{jid}")
        job = Job(jid, redis, _deserializer=deserialize)
        assert await job.status() == JobStatus.complete
        info = await job.result_info()
        assert info is not None and info.success
        assert info.result == ("completed" if rid in ids else "awaiting_human"), (rid, info.result)
        assert info.function == "run_agent" and tuple(info.args) == (rid, 1)


async def test_a_poll_that_claims_hundreds_of_runs_starts_a_chunk_of_them_a_loop_turn(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs a poll claims take their first steps in the turn after their tasks are made: 256
    of them in one turn held the loop 25-60 ms (bench figure 4's loop lag). A callback that queues
    itself again counts the loop's turns; each run notes the turn its job started in."""
    from worker.process import jobs

    turn = 0
    started_in: list[int] = []
    loop = asyncio.get_running_loop()

    def tick() -> None:
        nonlocal turn
        turn += 1
        handle[0] = loop.call_soon(tick)

    handle = [loop.call_soon(tick)]

    async def noting(ctx: dict[str, Any], run_id: str, gen: int) -> str:
        started_in.append(turn)
        return await run_agent(ctx, run_id, gen)

    monkeypatch.setattr(jobs, "run_agent", noting)
    p = producer_for(redis, redis_url)
    ids = [s.run_id for s in await p.submit_many([script_run([{"text": "hi"}])] * 256)]
    try:
        async with running_worker(redis_url, claim_batch=64) as wp:  # up to four batches a poll
            recs = await wait_all(p, ids, 30)
            assert {r.status.value for r in recs.values()} == {"completed"}
            assert wp.worker.job_counter == 0
    finally:
        handle[0].cancel()
    per_turn = Counter(started_in)
    assert len(started_in) == 256 and max(per_turn.values()) <= START_CHUNK, per_turn.most_common(3)


async def test_a_full_claim_is_followed_by_the_next_one_while_its_jobs_are_still_starting(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim of a deep queue that came back full sends the next claim before its own jobs start,
    so Redis runs it while the worker starts them (a claim of 256 took Redis about 20 ms, in which
    the worker waited: bench figure 4). Seen from Redis: the queue shrinks while a claim's jobs are
    being started; before, nothing claimed until they all had, and the next poll came."""
    from worker.process.arq_worker import ResilientWorker

    start_claimed = ResilientWorker._start_claimed
    queue_around: list[tuple[int, int]] = []  # the queue's depth as a claim's jobs begin and end starting
    # Read without yielding to the loop: an await here would let the claim sent ahead go out before
    # the depth "before" is read (seen under load: the queue then had shrunk already).
    depth = SyncRedis.from_url(redis_url)

    async def noting(self: ResilientWorker, part: Any, reply: list[Any], lease_id: str) -> int:
        before = int(depth.zcard(K.queue))
        n = await start_claimed(self, part, reply, lease_id)
        queue_around.append((before, int(depth.zcard(K.queue))))
        return n

    monkeypatch.setattr(ResilientWorker, "_start_claimed", noting)
    p = producer_for(redis, redis_url, max_batch=1000)
    ids = [s.run_id for s in await p.submit_many([script_run([{"text": "hi"}])] * 768)]
    async with running_worker(redis_url, claim_batch=64, max_jobs=1000):  # claims of up to 256
        recs = await wait_all(p, ids, 60)
    depth.close()
    assert {r.status.value for r in recs.values()} == {"completed"}
    assert any(after < before for before, after in queue_around), queue_around


async def test_a_stop_while_a_claims_runs_are_still_starting_hands_each_back_at_once(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop comes as the first of 256 claimed runs starts: the runs that start after the drain
    began hand themselves back as they join, instead of running their model calls until the drain
    timeout (13 s here before, with a 3 s timeout; the whole stop now takes well under one)."""
    from worker.process import jobs

    box: list[WorkerProcess] = []

    async def stopping_at_first(ctx: dict[str, Any], run_id: str, gen: int) -> str:
        box[0].request_stop()
        return await run_agent(ctx, run_id, gen)

    monkeypatch.setattr(jobs, "run_agent", stopping_at_first)
    p = producer_for(redis, redis_url)
    ids = [s.run_id for s in await p.submit_many([script_run([{"text": "hi", "delayMs": 60_000}])] * 256)]
    t0 = time.monotonic()
    async with running_worker(redis_url, claim_batch=64, drain_timeout_s=3.0) as wp:
        box.append(wp)
        await asyncio.wait_for(wp.stopping.wait(), 10)
    assert time.monotonic() - t0 < 3.0  # within the drain timeout: no run waited it out
    statuses = [await redis.hget(K.run(rid), "status") for rid in ids]
    assert statuses == [b"queued"] * len(ids)  # every run back on the queue, none left running


async def test_a_job_whose_key_redis_lost_still_runs_its_run(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run([{"text": "hi"}]))
    await redis.delete(K.job_key(K.job_id(sub.run_id, 1)))  # the run hash, not the job payload, decides
    async with running_worker(redis_url):
        rec = await p.wait(sub.run_id, timeout_s=10)
    assert rec is not None and rec.status.value == "completed"


def test_a_deep_queue_is_claimed_in_halves_a_shallow_one_in_batches_by_a_worker_not_alone() -> None:
    assert claim_size(room=500, due=40, batch=64) == 64  # as before: a burst spreads over workers
    assert claim_size(room=1010, due=1000, batch=64) == 256  # an idle worker, a deep queue
    assert claim_size(room=300, due=1000, batch=64) == 150  # half its room, others find the rest
    assert claim_size(room=30, due=1000, batch=64) == 30  # never beyond the room
    assert claim_size(room=0, due=1000, batch=64) == 0
    # A worker alone shares with no one: no halving tail (244 due → 122, 64, 58 over three polls).
    assert claim_size(room=254, due=244, batch=64, workers=1) == 244
    assert claim_size(room=1010, due=1000, batch=64, workers=1) == 256  # still four batches a turn
    assert claim_size(room=100, due=244, batch=64, workers=1) == 100
    assert claim_size(room=254, due=244, batch=64, workers=2) == 122


def test_job_ids_name_their_run_and_dispatch() -> None:
    for rid, gen in (("r1", 1), ("r1", 2), ("a.b:c-d_9", 17)):
        assert LAYOUT.of_job(K.job_id(rid, gen)) == (K, rid, gen)


def test_a_worker_process_imports_at_start_up_what_its_clients_import_late() -> None:
    """anyio's asyncio backend, imported by httpx's pools when they first close a connection: the
    imports took 70 ms of a worker's event loop (bench figure 4's loop lag, at its shutdown)."""
    code = (
        "import sys\n"
        "from shared.settings import Settings\n"
        "from worker.process.jobs import WorkerProcess\n"
        "assert 'anyio._backends._asyncio' not in sys.modules\n"
        "WorkerProcess(Settings(redis_url='redis://127.0.0.1:1/0', worker_metrics_port=-1))\n"
        "assert 'anyio._backends._asyncio' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)  # a fresh process's imports


async def test_a_worker_builds_one_tls_context_for_its_clients_before_its_loop_holds_runs(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each context loads the CA bundle (about 25 ms): the worker's clients for models and tools
    built three on its event loop. Now one, in WorkerProcess(), shared by both."""
    built: list[ssl.SSLContext] = []
    create = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(create(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(ssl, "create_default_context", counting)
    async with running_worker(redis_url) as wp:
        for _ in range(500):  # the clients are built once the worker reached Redis
            if getattr(wp, "deps", None) is not None:
                break
            await asyncio.sleep(0.01)
        assert built == [wp.tls]
        assert wp.deps.http._transport._pool._ssl_context is wp.tls  # type: ignore[attr-defined]
        assert wp.deps.guarded_http._transport.ssl_context is wp.tls  # type: ignore[attr-defined]


def test_a_worker_process_freezes_what_start_up_built() -> None:
    import gc

    before = gc.get_threshold()
    try:
        WorkerProcess(Settings(redis_url="redis://127.0.0.1:1/0", worker_metrics_port=-1))
        assert gc.get_freeze_count() > 0  # start-up objects are no longer scanned
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        gc.set_threshold(*before)


async def test_the_jobs_ending_in_one_turn_on_several_partitions_of_one_node_share_one_round_trip(
    redis: Redis,
) -> None:
    parts = Partitions.of_client(redis, 4)  # four partitions, one Redis: one node
    jobs = [(p, p.job_id(f"fin-{p.index}", 1)) for p in parts.parts]
    for p, jid in jobs:
        await redis.set(p.job_key(jid), b"job")
        await redis.set(p.in_progress_key(jid), b"1")
        await redis.zadd(p.queue, {jid: 1})
    finisher = JobFinisher(parts, keep_result_ms=60_000)
    await asyncio.gather(*(finisher.finish(jid, True, b"result") for _, jid in jobs))
    assert finisher.batches == 1  # one pipeline for the node, not one per partition
    for p, jid in jobs:
        assert not await redis.exists(p.job_key(jid), p.in_progress_key(jid))
        assert await redis.zcard(p.queue) == 0
        assert await redis.get(f"arq:result:{jid}") == b"result"
