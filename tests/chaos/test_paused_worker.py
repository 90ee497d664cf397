"""A worker paused while its tool calls are still connecting must not send them when it wakes up.

The finding: a downstream slow to accept connections (a full listen backlog), a worker
SIGSTOPped while its HTTP tool calls wait in connect, another worker taking its runs over and
publishing the calls' results; on SIGCONT the stale worker's connects completed and it sent its
requests, which executed *after* the results had been published. Fencing refused its commits, too
late to stop the effect. Now two things keep the woken worker from sending: its heartbeat, whose
sleep ends in the same loop turn as the connects, finds the lease deadline passed and stops the runs
before their tasks step again; and the HTTP client checks the lease right before the request's bytes
are written (for a deadline that passes between beats: tests/unit/test_lease.py). Either alone keeps
this test green; with both removed every trial sends all its calls late.

In the suite: a few short trials (< 60 s). More: ``pytest -m slow tests/chaos/test_paused_worker.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from redis.asyncio import Redis

from shared.profiles import load_profiles
from tests.chaos.harness import chaos_profiles
from tests.integration.helpers import producer_for, stream, wait_all
from tests.support.ledger import Ledger
from tests.support.procs import WorkerProc
from tests.support.schema import K, tool_records
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

LEASE = {
    "AGENTMILL_LEASE_MS": "1500",
    "AGENTMILL_HEARTBEAT_MS": "250",
    "AGENTMILL_RECONCILE_MS": "300",
    "AGENTMILL_QUEUED_CHECK_MS": "2000",
}


def one_call(i: int) -> dict[str, object]:
    script = [{"toolCalls": [{"name": "ledger", "arguments": {"step": i}}]}, {"text": "done"}]
    return {"agent": "chaos", "inputMessages": [{"role": "user", "content": f"pause {i}"}],
            "runtimeHints": {"script": script}}  # fmt: skip


def connects_to(pid: int, port: int) -> Counter[str]:
    """The TCP states of a process's sockets to a local port (from /proc): SYN_SENT while connecting."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    states: Counter[str] = Counter()
    with open("/proc/net/tcp") as f:
        for line in list(f)[1:]:
            cols = line.split()
            remote_port = int(cols[2].split(":")[1], 16)
            if remote_port == port and cols[9] in inodes:
                states[{"01": "ESTABLISHED", "02": "SYN_SENT"}.get(cols[3], cols[3])] += 1
    return states


async def trial(redis: Redis, redis_url: str, tmp_path: Path, n: int, k: int) -> dict[str, object]:
    """One trial; returns counts: calls, ledger executions, executions after the result was published
    (and the fencing tokens they carried: 1 is the paused worker's, 2 the rescuer's)."""
    await redis.flushall()
    with Ledger(backlog=1) as ledger:
        # a connect that outlives the tool's timeout fails on waking whatever the guard does: the
        # timeout is set past the longest pause, so the guard is what keeps the requests unsent
        profiles = chaos_profiles(ledger.url, tmp_path / f"profiles{k}.json", timeout_s=90)
        env = {**LEASE, "AGENTMILL_PROFILES": str(profiles)}
        p = producer_for(redis, redis_url, profiles=str(profiles))
        assert load_profiles(str(profiles))
        stale = WorkerProc(redis_url, env={**env, "AGENTMILL_WORKER_ID": f"stale{k}"},
                           log=tmp_path / f"stale{k}.log").start()  # fmt: skip
        rescuer: WorkerProc | None = None
        try:
            await until(
                "the first worker's lease", lambda: redis.zscore(K.workers, f"stale{k}"), 30, every=0.05
            )
            ledger.hold_accepts()  # from now on connects to the ledger hang in SYN retries
            subs = await p.submit_many([one_call(i) for i in range(n)])
            ids = [s.run_id for s in subs]  # type: ignore[union-attr]

            async def all_claimed() -> bool:
                return all([await tool_records(redis, r) for r in ids])

            await until("every call to be claimed", all_claimed, 20, every=0.05)

            async def connecting() -> bool:
                return connects_to(stale.pid, ledger.port)["SYN_SENT"] >= n

            await until("every call to be stuck in connect", connecting, 10, every=0.05)
            stale.signal(signal.SIGSTOP)
            ledger.release_accepts()
            rescuer = WorkerProc(redis_url, env={**env, "AGENTMILL_WORKER_ID": f"rescuer{k}"},
                                 log=tmp_path / f"rescuer{k}.log").start()  # fmt: skip
            recs = await wait_all(p, ids, 40)
            assert {r.status.value for r in recs.values()} == {"completed"}

            async def connected() -> bool:  # the kernel completes the stopped worker's connects
                return connects_to(stale.pid, ledger.port)["SYN_SENT"] == 0

            await until("the stopped worker's connects to complete", connected, 20, every=0.05)
            stale.signal(signal.SIGCONT)

            async def gave_up() -> bool:  # its beat found its lease lapsed; its runs' calls ended
                text = (tmp_path / f"stale{k}.log").read_text(errors="replace")
                return f"worker stale{k} carries on under lease id" in text

            await until("the woken worker to give its runs up", gave_up, 20, every=0.05)
            await asyncio.sleep(0.3)  # and whatever it still sent to reach the ledger
            assert stale.alive
        finally:
            stale.signal(signal.SIGCONT)
            stale.stop(timeout=10)
            if rescuer is not None:
                rescuer.stop(timeout=10)
        executed = ledger.executed_at()
        tokens = {k: list(v) for k, v in ledger.tokens.items()}
    late = 0
    late_tokens: list[str] = []
    for rid in ids:
        events = await stream(redis, rid)
        published = {e.payload["toolCallId"]: e.ts / 1000.0 for e in events if e.kind == "tool_result"}
        assert len(published) == 1
        for call_id, at in published.items():
            key = f"{rid}:{call_id}"
            for t, token in zip(executed.get(key, []), tokens.get(key, []), strict=True):
                if t >= at + 0.001:  # an event's ts is whole milliseconds, cut down
                    late += 1
                    late_tokens.append(token)
    return {"calls": n, "executions": sum(len(v) for v in executed.values()), "late": late,
            "late_tokens": late_tokens}  # fmt: skip


async def run_trials(redis: Redis, redis_url: str, tmp_path: Path, trials: int, n: int) -> None:
    results = [await trial(redis, redis_url, tmp_path, n, k) for k in range(trials)]
    print("\n" + "\n".join(f"trial {k}: {r}" for k, r in enumerate(results)))
    assert all(r["executions"] >= r["calls"] for r in results)  # every call reached the ledger
    assert [r["late"] for r in results] == [0] * trials  # none after its result was published


@pytest.mark.timeout(120)
async def test_a_worker_paused_while_connecting_sends_nothing_after_waking(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    await run_trials(redis, redis_url, tmp_path, trials=2, n=8)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_worker_paused_while_connecting_many_trials(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    await run_trials(redis, redis_url, tmp_path, trials=15, n=20)
