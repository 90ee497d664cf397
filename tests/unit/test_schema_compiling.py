"""Schemas compiled off the event loop (shared/schema_compiling.py): an attacker's schemas at their
bounds cost the loop a few interpreter switches, not their whole compile time; a refused schema sent
again costs its hash; the thread's queue is bounded."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shared import schema_compiling, schema_validator
from shared.schema_compiling import MAX_PENDING, SchemaQueueFullError, compile_all
from shared.schema_validator import SchemaBoundError, compiled, is_cached
from tests.support.schemas import doubling, wide

ROOT = Path(__file__).resolve().parents[2]
LOOP_TURN_BOUND_S = 0.05  # the loop's longest turn while the thread compiles, quiet machine
TICK_S = 0.002


def _variants(n: int) -> list[dict[str, Any]]:
    """n distinct doubling schemas, none cached (each refused at its branches bound)."""
    return [{**doubling(), "title": f"attack {time.perf_counter_ns()} {i}"} for i in range(n)]


def _wide(n: int) -> list[dict[str, Any]]:
    """n distinct schemas at the size bound, none cached: a few hundred ms of compiling each."""
    return [wide(700, f"{time.perf_counter_ns()} {i}") for i in range(n)]


async def _longest_turn(work: Any) -> tuple[float, float]:
    """(the longest a ticker on the loop waited past its sleep, the wall time) while ``work`` runs."""
    longest = 0.0
    done = False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(TICK_S)  # a loop mostly waiting, as a server's is
            now = time.perf_counter()
            longest = max(longest, now - last - TICK_S)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    await work()
    wall = time.perf_counter() - t0
    done = True
    await tick
    return longest, wall


async def test_the_loop_keeps_turning_while_an_attackers_schemas_compile() -> None:
    async def inline() -> None:  # one such schema compiled on the loop: one turn that long
        compiled(_wide(1)[0])

    one_schema, _ = await _longest_turn(inline)
    schemas = [*_wide(3), *_variants(3)]

    async def off_loop() -> None:  # three attackers at once
        await asyncio.gather(*(compile_all(schemas[i::3]) for i in range(3)))

    longest, wall = await _longest_turn(off_loop)
    # On a quiet machine: one schema ~270 ms inline, the longest turn off the loop a few ms (a
    # switch interval or two). A busy machine stretches both (its scheduler's own gaps included).
    bound = max(LOOP_TURN_BOUND_S, one_schema / 4)
    assert longest < bound, f"a loop turn took {longest * 1000:.0f} ms of {wall * 1000:.0f} ms; " \
                            f"one schema inline: {one_schema * 1000:.0f} ms"  # fmt: skip
    for s in schemas:  # each validator or refusal kept: the synchronous check answers from the cache
        assert is_cached(s)
    compiled(schemas[0])
    with pytest.raises(SchemaBoundError) as exc:
        compiled(schemas[-1])
    assert exc.value.bound == "branches"


def test_a_refused_schema_sent_again_costs_its_hash() -> None:
    schema = {**wide(700, "refused"), "pattern": "(a)\\1"}  # refused late: after the walk, at RE2
    t0 = time.process_time()
    with pytest.raises(SchemaBoundError):
        compiled(schema)
    first = time.process_time() - t0
    t0 = time.process_time()
    for _ in range(20):
        with pytest.raises(SchemaBoundError) as exc:
            compiled(schema)
    again = (time.process_time() - t0) / 20
    assert exc.value.bound == "patterns"
    assert again < first, (again, first)


async def test_a_cached_schema_does_not_reach_the_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    compiled(schema)
    monkeypatch.setattr(schema_compiling, "_pool", None)  # any use of the thread would fail
    await compile_all([schema])
    await compile_all([])


async def test_the_threads_queue_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_compiling, "_pending", MAX_PENDING)
    with pytest.raises(SchemaQueueFullError):
        await compile_all(_variants(1))
    monkeypatch.setattr(schema_compiling, "_pending", 0)
    schema = _variants(1)[0]
    job = asyncio.ensure_future(compile_all([schema]))
    await asyncio.sleep(0)
    job.cancel()  # the caller gone: the job still counts until the thread is done with it
    with pytest.raises(asyncio.CancelledError):
        await job
    for _ in range(500):
        if schema_compiling._pending == 0:
            break
        await asyncio.sleep(0.01)
    assert schema_compiling._pending == 0


def test_the_cache_keeps_refusals_within_its_size() -> None:
    for s in _variants(3):
        with pytest.raises(SchemaBoundError):
            compiled(s)
    assert len(schema_validator._cache) <= schema_validator.CACHED


async def test_a_submission_waiting_behind_a_full_queue_is_a_429(monkeypatch: pytest.MonkeyPatch) -> None:
    from producer.schemas_ready import schemas_ready
    from producer.submission import SubmissionError

    rf = {"type": "json_schema", "jsonSchema": {"schema": _variants(1)[0]}}
    run = {"inputMessages": [{"role": "user", "content": "x"}], "responseFormat": rf}
    monkeypatch.setattr(schema_compiling, "_pending", MAX_PENDING)
    with pytest.raises(SubmissionError) as exc:
        await schemas_ready([run])
    assert exc.value.status == 429 and exc.value.code == "schemas_busy" and exc.value.retry_after_s == 1
    await schemas_ready([{"inputMessages": [{"role": "user", "content": "x"}]}])  # no schema: no queue


async def test_without_the_process_apart_the_thread_checks_the_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from concurrent.futures.process import BrokenProcessPool

    def broken() -> Any:
        raise BrokenProcessPool("gone")

    monkeypatch.setattr(schema_compiling, "_apart", broken)
    ok, bad = wide(20, f"{time.perf_counter_ns()}"), _variants(1)[0]
    await compile_all([ok, bad])
    assert is_cached(ok) and is_cached(bad)
    compiled(ok)
    with pytest.raises(SchemaBoundError):
        compiled(bad)


async def test_a_small_schema_is_checked_on_the_thread_without_the_process_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client tool's parameters (below INLINE_BYTES as JSON) are checked on the thread at once: a
    run bringing them does not wait for the process apart to start (seconds on a busy machine)."""
    from concurrent.futures.process import BrokenProcessPool

    asked: list[int] = []

    def apart() -> Any:
        asked.append(1)
        raise BrokenProcessPool("the process apart is not asked: the thread checks it")

    monkeypatch.setattr(schema_compiling, "_apart", apart)
    tag = f"{time.perf_counter_ns()}"
    small = {"type": "object", "properties": {"q": {"type": "string"}}, "title": tag}
    refused = {"type": 12, "title": tag}  # not a JSON Schema, and small
    await compile_all([small, refused])
    assert asked == []
    compiled(small)
    with pytest.raises(SchemaBoundError) as exc:
        compiled(refused)
    assert exc.value.bound == "schema"
    await compile_all([wide(20, tag)])  # past INLINE_BYTES: the process apart's
    assert asked == [1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
async def test_the_process_apart_runs_below_the_loops_priority() -> None:
    await compile_all(_variants(1))  # not cached: checked in the process apart, started if need be
    apart = schema_compiling._process
    assert apart is not None
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    pids = list(apart._processes)
    nice = [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids]
    assert pids and all(n > mine for n in nice), (mine, nice)  # its start-up and checks yield to the loops
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # the loop's thread: as it was


def _gone(pid: int) -> bool:
    """No such process, or a zombie no one has reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_process_apart_ends_when_its_parent_is_killed() -> None:
    code = (
        "import asyncio, time\n"
        "from shared import schema_compiling as sc\n"
        "from tests.support.schemas import doubling\n"
        "asyncio.run(sc.compile_all([{**doubling(), 'title': str(time.time())}]))\n"
        "print(*sc._process._processes, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert parent.stdout is not None
        apart = int(parent.stdout.readline())
        assert not _gone(apart)
    finally:
        parent.kill()  # SIGKILL: it cannot shut its executor down
        parent.wait()
    deadline = time.monotonic() + 10 * schema_compiling.PARENT_POLL_S
    while not _gone(apart) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(apart), f"the process apart {apart} outlived its parent"
