"""A new one-step run's round trips after its claim: its ending commit, which also finishes arq's job
(its keys gone, its result stored: worker/process/finisher.py JobEnding). Its opening event (``running``) is written
by the claim that takes it (acquire_run.lua), not by a commit of its own before its model call.
Counted as the packed writes to Redis that name the run, from the worker's tasks (the claim names
no run: it picks the queue's jobs itself)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from shared.dispatch import deserialize
from tests.integration.helpers import producer_for, running_worker, script_run, stream, until_status

pytestmark = pytest.mark.integration


@contextmanager
def writes_naming(monkeypatch: pytest.MonkeyPatch, run_id: list[str]) -> Iterator[list[bytes]]:
    """The packed writes that name ``run_id[0]``, from tasks other than the test's own."""
    sent: list[bytes] = []
    real = AbstractConnection.send_packed_command
    me = asyncio.current_task()

    async def send(self: Any, command: Any, check_health: bool = True) -> None:
        packed = command if isinstance(command, bytes | str) else b"".join(bytes(c) for c in command)
        packed = packed.encode() if isinstance(packed, str) else packed
        if run_id and run_id[0].encode() in packed and asyncio.current_task() is not me:
            sent.append(packed)
        await real(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", send)
    yield sent
    monkeypatch.setattr(AbstractConnection, "send_packed_command", real)


def script_of(packed: bytes) -> str:
    """The function a write calls (FCALL's first argument), else its first command's name."""
    parts = packed.split(b"\r\n")
    name = parts[2].decode()
    return parts[4].decode().rsplit("_", 1)[0] if name.upper() == "FCALL" else name.upper()


async def test_a_new_one_step_run_makes_one_round_trip_after_its_claim(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = producer_for(redis, redis_url)
    run_id: list[str] = []
    async with running_worker(redis_url) as wp:
        warm = (await p.submit(script_run([{"text": "hi"}]))).run_id  # scripts loaded, connections made
        await until_status(redis, warm, "completed")
        with writes_naming(monkeypatch, run_id) as sent:
            run_id.append((await p.submit(script_run([{"text": "hi"}]))).run_id)
            await until_status(redis, run_id[0], "completed")
            for _ in range(200):  # arq's finish of the job comes a moment after the run's ending
                if not await redis.exists(f"arq:in-progress:{{0}}{run_id[0]}"):
                    break
                await asyncio.sleep(0.01)
        assert wp.worker.job_counter == 0
    calls = [script_of(w) for w in sent]
    print(f"round trips naming the run after its claim: {calls}")
    assert calls == ["commit"], calls  # the ending's commit, which finishes arq's job too
    job = f"{{0}}{run_id[0]}"
    assert not await redis.exists(f"arq:in-progress:{job}", f"arq:job:{job}")
    record = deserialize(await redis.get(f"arq:result:{job}"))  # arq's, as arq's Job.result() reads it
    assert record["s"] is True and record["r"] == "completed" and record["st"] <= record["ft"], record
    assert 0 < await redis.pttl(f"arq:result:{job}") <= 60_000
    events = await stream(redis, run_id[0])
    kinds = [(e.kind.value, e.payload.get("status")) for e in events]
    assert kinds[0] == ("status", "running") and kinds[-1] == ("status", "completed"), kinds
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].payload == {"status": "running", "agent": "scripted"}


async def test_a_woken_worker_claims_with_its_wait_not_after_it(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle worker's claim rides behind its wait (worker/process/woken_claims.py): sent with the
    BLPOP in one write, run by Redis as the submission's signal ends the wait. Between the
    submission and its run's end the worker sends no claim on its own (it used to send one as the
    signal came: a round trip before the run could start)."""
    p = producer_for(redis, redis_url)
    writes: list[bytes] = []
    real = AbstractConnection.send_packed_command
    me = asyncio.current_task()

    async def send(self: Any, command: Any, check_health: bool = True) -> None:
        packed = command if isinstance(command, bytes | str) else b"".join(bytes(c) for c in command)
        if asyncio.current_task() is not me:
            writes.append(packed.encode() if isinstance(packed, str) else packed)
        await real(self, command, check_health)

    async with running_worker(redis_url, poll_delay_s=0.5) as wp:  # idle polls a second apart
        warm = (await p.submit(script_run([{"text": "hi"}]))).run_id
        await until_status(redis, warm, "completed")
        await asyncio.sleep(0.1)  # waiting again, its claim behind the wait
        monkeypatch.setattr(AbstractConnection, "send_packed_command", send)
        rid = (await p.submit(script_run([{"text": "hi"}]))).run_id
        await until_status(redis, rid, "completed")
        monkeypatch.setattr(AbstractConnection, "send_packed_command", real)
        assert wp.worker.wake is not None and wp.worker.wake.signals >= 2
    claims = [w for w in writes if b"claim_jobs" in w]
    alone = [w[:80] for w in claims if script_of(w) != "BLPOP"]
    print(f"claims sent after the submission: {len(claims)}, {len(alone)} not behind a wait")
    assert not alone, alone
