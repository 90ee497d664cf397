"""A worker with nothing to claim waits for its partition's wake signal (worker/process/wake.py): on an idle
pool of real worker processes a run starts, and a parked run resumes, within milliseconds, not a
poll interval; a lost signal costs at most two poll intervals (an idle worker's poll); one submission wakes one worker."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import ClientToolResult
from producer.service import Producer
from shared.fields import RunField as F
from tests.integration.helpers import producer_for, script_run, until_status
from tests.support.procs import workers
from tests.support.schema import K
from worker.process.claims import IDLE_RIDES
from worker.process.wake import IDLE_POLLS

pytestmark = pytest.mark.integration

# A long poll interval, so a run started by a poll (about half of it on average) cannot pass for
# one started by its signal (a few ms); the figures at the default 50 ms are bench figure 5a's.
POLL_S = 0.25
ENV = {"AGENTMILL_POLL_DELAY_S": str(POLL_S)}


async def _idle(redis: Redis, n: int) -> None:
    """Until ``n`` workers hold a lease, and a moment more for their first polls."""
    for _ in range(600):
        if await redis.zcard(K.workers) >= n:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(3 * POLL_S)


async def _next_event_ms(redis: Redis, run_id: str, after: str, started: float) -> float:
    """Wall-clock ms from ``started`` until the run's stream has an entry past ``after``."""
    got = await redis.xread({K.events(run_id): after}, count=1, block=5000)
    assert got, f"no event of {run_id} past {after} within 5 s"
    return (time.perf_counter() - started) * 1000


async def _start_latencies(p: Producer, redis: Redis, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        sub = await p.submit(script_run([{"text": "hi"}]))
        out.append(await _next_event_ms(redis, sub.run_id, "0-0", t0))
        await asyncio.sleep(0.01)
    return out


def _p99(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.99 * len(xs)) - 1)]


async def test_an_idle_pool_starts_each_run_within_milliseconds_of_its_submission(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url)
    with workers(redis_url, 2, env=ENV):
        await _idle(redis, 2)
        lat = await _start_latencies(p, redis, 100)
    p50, p99 = statistics.median(lat), _p99(lat)
    print(f"submit -> running: p50 {p50:.1f} ms, p99 {p99:.1f} ms (poll {POLL_S * 1000:.0f} ms)")
    # Measured 2-4 ms p50 on a loaded 2-core machine; by poll alone it would be about 125 ms.
    assert p50 <= 25, lat
    # The p99 of 100 samples is their second slowest: one stall of a loaded machine (a sample of
    # 164 ms among 2-4 ms ones, 50 samples: their slowest was the p99) is not held against the
    # signal, two runs left to the poll are (a signal lost one time in 20: failed 5 times in 5).
    assert p99 <= 4 * 25, lat


async def test_an_approval_resumes_its_run_within_milliseconds(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    lat = []
    with workers(redis_url, 2, env=ENV):
        await _idle(redis, 2)
        for _ in range(10):
            sub = await p.submit(script_run(
                [{"toolCalls": [{"id": "t1", "name": "echo", "arguments": {}}]}, {"text": "ok"}],
                toolPolicy={"requireApprovalByDefault": True},
            ))  # fmt: skip
            rid = sub.run_id
            await until_status(redis, K.run(rid).split("run:", 1)[1], "awaiting_human")
            await asyncio.sleep(2 * POLL_S)  # the pool idle again
            (last,) = await redis.xrevrange(K.events(rid), count=1)
            calls = list(orjson.loads(await redis.hget(K.run(rid), F.APPROVALS) or b"{}"))
            assert calls, "no approval pending"
            t0 = time.perf_counter()
            for call in calls:
                await p.settle_approval(rid, call, approved=True)
            lat.append(await _next_event_ms(redis, rid, last[0].decode(), t0))
    print(f"approval -> next event: p50 {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms")
    assert statistics.median(lat) <= 25, lat


async def test_a_client_tool_result_resumes_its_run_within_milliseconds(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The run's input declares a client tool, the model calls it, the run parks on no worker; the
    caller's result puts it back on the queue with a wake signal: the next event within ms."""
    lookup = {"name": "lookup", "description": "Look a customer up.",
              "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [
        {"name": "crm", "provider": {"kind": "scripted", "mode": "script"}, "runClientTools": ["lookup"]}
    ]}))  # fmt: skip
    p = producer_for(redis, redis_url, profiles=str(path))
    lat = []
    with workers(redis_url, 2, env={**ENV, "AGENTMILL_PROFILES": str(path)}):
        await _idle(redis, 2)
        for _ in range(10):
            script = [{"toolCalls": [{"name": "lookup", "arguments": {"q": "ACME"}}]}, {"text": "ok"}]
            sub = await p.submit({**script_run(script), "agent": "crm", "clientTools": [lookup]})
            rid = sub.run_id
            await until_status(redis, rid, "awaiting_tools")
            await asyncio.sleep(2 * POLL_S)  # the pool idle again
            (last,) = await redis.xrevrange(K.events(rid), count=1)
            rec = await p.get(rid)
            assert rec is not None and rec.pending_tool_calls, "no client call pending"
            results = [ClientToolResult(tool_call_id=c["toolCallId"], content="12 open orders")
                       for c in rec.pending_tool_calls]  # fmt: skip
            t0 = time.perf_counter()
            assert (await p.post_tool_results(rid, results))[0] == "resumed"
            lat.append(await _next_event_ms(redis, rid, last[0].decode(), t0))
    print(f"client tool result -> next event: p50 {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms")
    assert statistics.median(lat) <= 25, lat


async def test_a_dropped_signal_leaves_the_run_to_the_next_poll(redis: Redis, redis_url: str) -> None:
    """With every signal dropped (failpoint drop_wake_signal), runs still start: the poll after
    each wait finds them, within an idle worker's two poll intervals."""
    p = producer_for(redis, redis_url)
    with workers(redis_url, 1, env={**ENV, "AGENTMILL_FAILPOINTS": "drop_wake_signal"}):
        await _idle(redis, 1)
        lat = await _start_latencies(p, redis, 12)
    print(f"signals dropped: p50 {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms")
    assert max(lat) <= IDLE_POLLS * POLL_S * 1000 + 150, lat  # an idle worker's polls, and a margin
    assert statistics.median(lat) > 25, lat  # the failpoint bites: the poll, not the signal, started them


async def test_one_submission_wakes_one_of_four_idle_workers(redis: Redis, redis_url: str) -> None:
    """Each submission's signal is taken by one waiting worker: one claim call a submission, not
    one per worker (MONITOR counts the claim script's calls)."""
    p = producer_for(redis, redis_url)
    n = 20
    with workers(redis_url, 4, env=ENV):
        await _idle(redis, 4)
        claims = 0
        async with redis.monitor() as m:

            async def count() -> None:
                nonlocal claims
                async for cmd in m.listen():
                    if "claim_jobs" in str(cmd.get("command", "")):
                        claims += 1

            counter = asyncio.create_task(count())
            await asyncio.sleep(0.2)
            await _start_latencies(p, redis, n)
            await asyncio.sleep(0.2)
            counter.cancel()
            await asyncio.gather(counter, return_exceptions=True)
    print(f"claim calls: {claims} for {n} submissions, 4 idle workers")
    assert n <= claims <= 2 * n


@dataclass
class _Seen:
    claims: int = 0  # claim scripts called
    reads: int = 0  # the queue reads given, sent by a client (not from a script)


@contextlib.asynccontextmanager
async def _monitored(redis: Redis, reads: list[str]) -> AsyncIterator[_Seen]:
    """MONITOR while the block runs: the claim scripts called, and the client reads of the queue
    by the commands ``reads`` names."""
    seen = _Seen()
    async with redis.monitor() as m:

        async def count() -> None:
            async for cmd in m.listen():
                line = str(cmd.get("command", ""))
                if "claim_jobs" in line:
                    seen.claims += 1
                elif cmd.get("client_address") != "lua" and line.split(" ", 2)[:2] in (
                    [c, K.queue] for c in reads
                ):
                    seen.reads += 1

        counter = asyncio.create_task(count())
        try:
            yield seen
        finally:
            counter.cancel()
            await asyncio.gather(counter, return_exceptions=True)


async def _claims_and_counts(redis: Redis, seconds: float) -> tuple[int, int]:
    """For ``seconds``: the claim scripts called, and the queue counts sent by a client."""
    async with _monitored(redis, ["ZCOUNT"]) as seen:
        await asyncio.sleep(seconds)
    return seen.claims, seen.reads


async def test_a_woken_worker_claims_in_one_round_trip(redis: Redis, redis_url: str) -> None:
    """A signal is answered by the claim itself (the script picks the due jobs): the worker reads
    no queue first. MONITOR counts the queue reads sent by clients (not from scripts) against the
    claims: only the idle worker's own polls, every two poll intervals, read it."""
    p = producer_for(redis, redis_url)
    n = 20
    with workers(redis_url, 1, env=ENV):
        await _idle(redis, 1)
        async with _monitored(redis, ["ZRANGEBYSCORE", "ZCOUNT", "ZRANGE"]) as seen:
            await asyncio.sleep(0.2)
            t0 = time.perf_counter()
            await _start_latencies(p, redis, n)
            took = time.perf_counter() - t0
            await asyncio.sleep(0.2)
    claims, reads = seen.claims, seen.reads
    polls = (took + 0.4) / (IDLE_POLLS * POLL_S) + 2  # the idle polls meanwhile, and a margin
    print(f"{claims} claims, {reads} queue reads for {n} submissions in {took:.2f} s")
    assert claims >= n
    assert reads <= polls, (reads, polls)


async def test_a_worker_that_leaves_due_jobs_behind_claims_again_without_waiting(
    redis: Redis, redis_url: str
) -> None:
    """A claim that takes part of a deep queue (two workers each take half their room, as
    worker/process/arq_worker.py claim_size shares it) is followed by the next claim within a
    tenth of a poll interval, not by an idle worker's wait for a signal (two poll intervals: a
    queue of 600 took over 6 s to drain at a poll of 1 s)."""
    poll_s = 1.0
    env = {"AGENTMILL_POLL_DELAY_S": str(poll_s), "AGENTMILL_MAX_JOBS": "200"}
    p = producer_for(redis, redis_url, max_batch=1000)
    with workers(redis_url, 2, env=env) as procs:
        await _idle(redis, 2)
        for w in procs:
            w.signal(signal.SIGSTOP)
        try:
            subs = await p.submit_many([script_run([{"text": "hi"}]) for _ in range(600)])
        finally:
            t0 = time.perf_counter()
            for w in procs:
                w.signal(signal.SIGCONT)
        ids = [s.run_id for s in subs if not isinstance(s, Exception)]
        assert len(ids) == 600
        while await redis.zcard(K.live) or await redis.zcard(K.queue):
            assert time.perf_counter() - t0 < 30, "the queue did not drain in 30 s"
            await asyncio.sleep(0.02)
        took = time.perf_counter() - t0
    print(f"600 runs drained by 2 workers in {took:.2f} s (poll {poll_s:.0f} s)")
    assert took < 1.5 * IDLE_POLLS * poll_s, took


async def test_an_idle_workers_claims_ride_behind_its_waits_until_it_has_been_idle_a_while(
    redis: Redis, redis_url: str
) -> None:
    """After a run, a worker's claim rides behind each wait (worker/process/woken_claims.py): Redis runs
    it when the wait's time runs out, and that is its poll (no queue count of its own). After
    IDLE_RIDES waits in a row took nothing, its waits carry no claim and it polls by counting, as
    cheap as an idle pool was before the rides; the next run brings the rides back."""
    poll_s = 0.05
    wait_s = IDLE_POLLS * poll_s + 0.1  # a BLPOP's time runs out on the server's clock tick
    with workers(redis_url, 1, env={"AGENTMILL_POLL_DELAY_S": str(poll_s)}):
        await _idle(redis, 1)
        p = producer_for(redis, redis_url)
        for again in (False, True):
            sub = await p.submit(script_run([{"text": "hi"}]))
            await until_status(redis, sub.run_id, "completed")
            riding = await _claims_and_counts(redis, 2 * wait_s)
            print(f"after a run: {riding} (claims, counts)")
            assert riding[0] >= 1 and riding[1] == 0, riding
            if again:
                break
            await asyncio.sleep(IDLE_RIDES * wait_s)  # idle past its rides
            idle = await _claims_and_counts(redis, 4 * wait_s)
            print(f"idle a while: {idle}")
            assert idle[0] == 0 and idle[1] >= 2, idle
