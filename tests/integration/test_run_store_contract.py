"""One RunStore contract (worker/ports.py), kept by both stores: ``MemoryRunStore`` (the model the
runner's unit tests drive) and ``RedisRunStore`` (acquire.lua, commit.lua, release.lua against a
real redis-server), as saq runs one queue suite against each backend.

Each test is written once against a ``Backend``: submit a run, give a worker a handle on it, let a
worker's lease run out, and read back what the store holds (run hash, stream, tool records, session).
What only Redis does (dispatch numbers, the crash budget, a commit re-sent after a lost reply) is
tested in test_scripts.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.models import ClientToolResult, RunInput, RunStatus, ToolCall, ToolResult
from shared.clock import now_ms
from shared.fields import RunField
from shared.scripts import Scripts
from shared.settings import Settings
from shared.tool_records import ToolRecord, ToolState
from tests.integration.helpers import producer_for, script_run, stream
from tests.support.schema import K, parts_of, tool_records
from worker.adapters.memory_store import (
    MemoryRun,
    MemoryRunStore,
    MemorySessionStore,
    finalize,
    post_tool_results,
)
from worker.adapters.redis_store import RedisRunStore
from worker.adapters.worker_beat import beat
from worker.core import sessions
from worker.core.acquisition import Acquired, NotAcquired
from worker.core.commit_step import CommitStep, Outbox, SessionUpdate, TranscriptWrite
from worker.core.context import PastCall
from worker.core.store_errors import FencedError, SeqConflictError
from worker.ports import RunStore

SCRIPT = [{"text": "x"}]


def submitted(run_id: str, session_id: str | None) -> dict[str, Any]:
    session = {"sessionId": session_id, "autoCreateSession": True} if session_id else {}
    return script_run(SCRIPT, runId=run_id, **session)


@dataclass
class Held:
    """What the store holds for one run, read back the same way from either store."""

    status: str
    epoch: int
    checkpoint: bytes | None
    result: bytes
    iterations: int
    error_code: str
    restarts: int
    events: list[tuple[int, str, Any]]  # seq, kind, payload
    tools: dict[str, ToolRecord]


@dataclass
class History:
    loops: list[bytes] = field(default_factory=list)
    results: dict[str, bytes] = field(default_factory=dict)
    calls: list[bytes] = field(default_factory=list)


class Backend(Protocol):
    async def submit(self, run_id: str, session_id: str | None = None) -> None: ...

    async def handle(self, run_id: str, worker: str) -> RunStore:
        """A handle of ``worker`` (its lease unexpired) on the run, not yet acquired."""
        ...

    async def lose(self, worker: str) -> None:
        """The worker's lease runs out (it was killed, or paused past it)."""
        ...

    async def request_abort(self, run_id: str, reason: str) -> None:
        """Someone asks for the running run's abort (abort.lua)."""
        ...

    async def abort(self, run_id: str, reason: str) -> str:
        """Someone aborts a run no worker holds (queued or parked): it ends then and there (abort.lua's
        finalize). aborted | finished (it had ended)."""
        ...

    async def answer(self, run_id: str, call_id: str, content: str) -> str:
        """The run's client posts its call's result (tool_results.lua): recorded | resumed, or a refusal."""
        ...

    async def held(self, run_id: str) -> Held: ...

    async def history(self, session_id: str) -> History: ...


class InMemory:
    def __init__(self) -> None:
        self.runs: dict[str, MemoryRun] = {}
        self.sessions = MemorySessionStore()
        self.live: set[str] = set()

    async def submit(self, run_id: str, session_id: str | None = None) -> None:
        run_input = RunInput.model_validate(submitted(run_id, session_id))
        self.runs[run_id] = MemoryRun.submitted(run_id, run_input)
        self.runs[run_id].live = self.live

    async def handle(self, run_id: str, worker: str) -> RunStore:
        self.live.add(worker)
        return MemoryRunStore(self.runs[run_id], self.sessions)

    async def lose(self, worker: str) -> None:
        self.live.discard(worker)

    async def request_abort(self, run_id: str, reason: str) -> None:
        self.runs[run_id].abort_reason = reason

    async def abort(self, run_id: str, reason: str) -> str:
        ended = finalize(self.runs[run_id], self.sessions, RunStatus.ABORTED, "aborted", reason)
        return "aborted" if ended else "finished"

    async def answer(self, run_id: str, call_id: str, content: str) -> str:
        return post_tool_results(self.runs[run_id], [(call_id, content, False)], now_ms())

    async def held(self, run_id: str) -> Held:
        r = self.runs[run_id]
        return Held(r.status, r.epoch, r.checkpoint, r.result, r.iterations, r.error_code, r.restarts,
                    [(s, k, orjson.loads(p)) for s, k, _, p in r.events],
                    {i: ToolRecord.from_dict(v) for i, v in r.tools.items()})  # fmt: skip

    async def history(self, session_id: str) -> History:
        return History(
            list(self.sessions.history.get(session_id, [])),
            dict(self.sessions.results.get(session_id, {})),
            list(self.sessions.calls.get(session_id, [])),
        )


class InRedis:
    def __init__(self, redis: Redis, redis_url: str) -> None:
        self.redis = redis
        self.redis_url = redis_url
        self.settings = Settings(redis_url=redis_url, lease_ms=30_000)
        self.scripts = Scripts.for_settings(redis, self.settings)

    async def submit(self, run_id: str, session_id: str | None = None) -> None:
        await producer_for(self.redis, self.redis_url).submit(submitted(run_id, session_id))

    async def handle(self, run_id: str, worker: str) -> RunStore:
        await beat(parts_of(self.redis), self.scripts, worker, self.settings.lease_ms, register=True)
        return RedisRunStore(parts_of(self.redis), self.scripts, self.settings, K, run_id)

    async def lose(self, worker: str) -> None:
        await self.redis.delete(K.worker_lease(worker))  # what its expiry does

    async def request_abort(self, run_id: str, reason: str) -> None:
        assert await producer_for(self.redis, self.redis_url).abort(run_id, reason=reason) == "requested"

    async def abort(self, run_id: str, reason: str) -> str:
        return await producer_for(self.redis, self.redis_url).abort(run_id, reason=reason)

    async def answer(self, run_id: str, call_id: str, content: str) -> str:
        results = [ClientToolResult(tool_call_id=call_id, content=content)]
        return (await producer_for(self.redis, self.redis_url).post_tool_results(run_id, results))[0]

    async def held(self, run_id: str) -> Held:
        h = {k.decode(): v for k, v in (await self.redis.hgetall(K.run(run_id))).items()}
        tools = await tool_records(self.redis, run_id)
        return Held(h["status"].decode(), int(h["epoch"]), h.get("ckpt") or None, h.get("result", b""),
                    int(h.get("iterations") or 0), h.get("errorCode", b"").decode(), int(h.get(RunField.CRASHES) or 0),
                    [(e.seq, e.kind, e.payload) for e in await stream(self.redis, run_id)],
                    {k: ToolRecord.from_dict(v) for k, v in tools.items()})  # fmt: skip

    async def history(self, session_id: str) -> History:
        loops = await self.redis.lrange(K.session_loops(session_id), 0, -1)
        results = await self.redis.hgetall(K.session_results(session_id))
        calls = await self.redis.lrange(K.session_calls(session_id), 0, -1)
        return History(list(loops), {k.decode(): v for k, v in results.items()}, list(calls))


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        yield InMemory()
        return
    url: str = request.getfixturevalue("redis_url")  # a clean database on the suite's server
    redis = Redis.from_url(url)
    try:
        yield InRedis(redis, url)
    finally:
        await redis.aclose()


def ev(kind: str = "status", **payload: object) -> tuple[str, int, bytes]:
    return (kind, 1, orjson.dumps(payload or {"status": "running"}))


def done(call_id: str, content: str = "ok", epoch: int = 1, attempts: int = 1) -> ToolRecord:
    return ToolRecord.finished(
        epoch, attempts, ToolResult(tool_call_id=call_id, name="echo", content=content)
    )


async def acquired(backend: Backend, run_id: str, worker: str, gen: int = 1) -> tuple[RunStore, Acquired]:
    store = await backend.handle(run_id, worker)
    acq = await store.acquire(gen, worker)
    assert isinstance(acq, Acquired), acq
    return store, acq


async def test_a_new_run_is_acquired_at_epoch_one_with_its_input_and_opened(backend: Backend) -> None:
    """Opened: its running event written by the acquisition, once (not again when taken again)."""
    await backend.submit("r1")
    store, acq = await acquired(backend, "r1", "w1")
    assert (acq.epoch, acq.last_seq, acq.checkpoint, acq.abort_reason, acq.opened) == (1, 1, None, "", 1)
    assert (acq.approvals, acq.tool_records, acq.restarts) == ({}, {}, 0)
    assert RunInput.model_validate_json(acq.input).runtime_hints == {"script": SCRIPT}
    assert (store.epoch, store.last_seq) == (1, 1)
    held = await backend.held("r1")
    opening = (1, "status", {"status": "running", "agent": "scripted"})
    assert (held.status, held.epoch, held.events, held.tools) == ("running", 1, [opening], {})
    await backend.lose("w1")
    _, acq = await acquired(backend, "r1", "w2")  # taken again before a checkpoint: not opened twice
    assert (acq.epoch, acq.last_seq, acq.opened) == (2, 1, 1)
    assert (await backend.held("r1")).events == [opening]


async def test_commits_append_events_at_the_next_seqs_and_answer_the_last(backend: Backend) -> None:
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    assert await store.commit(CommitStep(Outbox([ev(), ev("model_delta", text="a")]))) == 3  # opening: 1
    assert await store.commit(CommitStep(Outbox(), checkpoint=b'{"seq":3}')) == 3  # nothing to append
    assert await store.commit(CommitStep(Outbox([ev("model_delta", text="b")]))) == 4
    assert store.last_seq == 4
    held = await backend.held("r1")
    assert held.events[1:] == [(2, "status", {"status": "running"}), (3, "model_delta", {"text": "a"}),
                               (4, "model_delta", {"text": "b"})]  # fmt: skip
    assert held.checkpoint == b'{"seq":3}'  # a commit without a checkpoint keeps the last one


async def test_the_configuration_transcript_and_iterations_a_step_wrote_reach_the_next_worker(
    backend: Backend,
) -> None:
    """Checkpoints written without the configuration and the transcript: what the steps wrote of
    them (the transcript set whole, then appended to), the next worker's acquire reads back."""
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    ckpt = b'{"seq":1,"state":{}}'
    await store.commit(CommitStep(Outbox([ev()]), checkpoint=ckpt, config=b'{"agent":"a"}',
                                  transcript=TranscriptWrite(False, b'{"m":1}'), iterations=1))  # fmt: skip
    await store.commit(
        CommitStep(Outbox([ev()]), transcript=TranscriptWrite(True, b',{"m":2}'), iterations=2)
    )
    assert await store.release(1) == "released"
    _, acq = await acquired(backend, "r1", "w2", gen=2)  # (the hand-back's dispatch)
    assert (acq.config, acq.transcript, acq.checkpoint) == (b'{"agent":"a"}', b'{"m":1},{"m":2}', ckpt)
    assert (await backend.held("r1")).iterations == 2


async def test_a_run_stopped_on_its_workers_passed_lease_goes_back_only_while_still_its_own(
    backend: Backend,
) -> None:
    """release(lost=True): the run stopped without writing on its worker's passed lease deadline. It
    goes back while it still runs under that worker at that epoch, a lost attempt counted; moved
    since (put back on the queue, taken by another worker), it is left where it is."""
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    await store.commit(CommitStep(Outbox([ev()]), checkpoint=b"ck1"))
    assert await store.release(1, lost=True) == "released"
    assert (await backend.held("r1")).restarts == 1
    assert await store.release(1, lost=True) == "fenced"  # queued now: a sweep's or its own doing
    again, acq = await acquired(backend, "r1", "w2", gen=2)
    assert (acq.epoch, acq.checkpoint, acq.restarts) == (2, b"ck1", 1)
    assert await store.release(1, lost=True) == "fenced"  # w2 holds it at a later epoch
    assert await again.commit(CommitStep(Outbox([ev()]))) == 3  # after the opening (1) and w1's commit (2)
    assert (await backend.held("r1")).status == "running"


@pytest.mark.parametrize("believed", [0, 5])  # a repeat of seq 1, a gap
async def test_a_commit_at_a_stale_seq_is_refused_and_writes_nothing(backend: Backend, believed: int) -> None:
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    await store.commit(CommitStep(Outbox([ev(), ev()]), checkpoint=b"ck1"))
    before = await backend.held("r1")
    store.last_seq = believed
    with pytest.raises(SeqConflictError):
        await store.commit(CommitStep(Outbox([ev("x")], claims=["c1"], records=[("c2", done("c2").to_json())]),
                           checkpoint=b"ck2", iterations=4))  # fmt: skip
    assert await backend.held("r1") == before


async def test_published_events_take_the_next_seqs_under_the_same_fence_as_a_commit(backend: Backend) -> None:
    """publish: events alone (a model's deltas), through commit's gate: the next seqs, the
    checkpoint left as it was; a stale seq or a lapsed lease writes nothing."""
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    await store.commit(CommitStep(Outbox([ev()]), checkpoint=b"ck1"))
    assert await store.publish([ev("model_delta", text="a"), ev("model_delta", text="b")]) == 4
    assert (
        await store.commit(CommitStep(Outbox([ev("model_delta", text="c")]))) == 5
    )  # a commit goes on after them
    held = await backend.held("r1")
    assert [(s, k) for s, k, _ in held.events] == [(1, "status"), (2, "status"), (3, "model_delta"),
                                                   (4, "model_delta"), (5, "model_delta")]  # fmt: skip
    assert held.checkpoint == b"ck1"
    store.last_seq = 3  # stale
    with pytest.raises(SeqConflictError):
        await store.publish([ev("model_delta", text="x")])
    assert await backend.held("r1") == held
    store.last_seq = 5
    await backend.lose("w1")
    with pytest.raises(FencedError):
        await store.publish([ev("model_delta", text="late")])
    assert await backend.held("r1") == held


async def test_events_checkpoint_claims_and_records_land_together(backend: Backend) -> None:
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    await store.commit(CommitStep(Outbox([ev()], claims=["c1", "c2"]), checkpoint=b"ck1", iterations=1))
    held = await backend.held("r1")
    assert held.tools == {"c1": ToolRecord.claim(1), "c2": ToolRecord.claim(1)}
    assert (held.checkpoint, held.iterations) == (b"ck1", 1)
    # A claim and a result in one commit: the result wins (the call ran between two commits).
    await store.commit(CommitStep(Outbox([ev("tool_result")], claims=["c3"], records=[("c1", done("c1").to_json()),
                                                                            ("c3", done("c3").to_json())])))  # fmt: skip
    assert (await backend.held("r1")).tools == {"c1": done("c1"), "c2": ToolRecord.claim(1), "c3": done("c3")}
    await store.commit(CommitStep(Outbox([ev()], claims=["c2"])))  # claimed again by the same worker
    assert (await backend.held("r1")).tools["c2"] == ToolRecord(ToolState.PENDING, epoch=1, attempts=2)


async def test_a_worker_whose_lease_ran_out_is_fenced_and_its_claims_are_counted_on(backend: Backend) -> None:
    await backend.submit("r1")
    old, _ = await acquired(backend, "r1", "w-old")
    await old.commit(CommitStep(Outbox([ev()], claims=["c1"]), checkpoint=b"ck1"))
    await backend.lose("w-old")
    with pytest.raises(FencedError):  # late: nobody took the run yet, and still it writes nothing
        await old.commit(CommitStep(Outbox([ev()])))
    new, acq = await acquired(backend, "r1", "w-new")
    assert (acq.epoch, acq.last_seq, acq.checkpoint, acq.restarts) == (2, 2, b"ck1", 1)
    assert acq.tool_records == {"c1": ToolRecord.claim(1)}  # the dangling claim: run it again
    before = await backend.held("r1")
    with pytest.raises(FencedError):
        await old.commit(CommitStep(Outbox([ev()], records=[("c1", done("c1").to_json())]), checkpoint=b"stale",
                         status="completed", aux=b"{}"))  # fmt: skip
    assert await backend.held("r1") == before
    assert await old.release(1) == "fenced"
    await new.commit(CommitStep(Outbox([ev()], claims=["c1"])))
    assert (await backend.held("r1")).tools["c1"] == ToolRecord(ToolState.PENDING, epoch=2, attempts=2)


async def test_a_run_held_by_a_live_worker_is_busy_and_its_own_worker_gets_it_back(backend: Backend) -> None:
    await backend.submit("r1")
    first, _ = await acquired(backend, "r1", "w1")
    await first.commit(CommitStep(Outbox([ev()])))
    other = await backend.handle("r1", "w2")
    busy = await other.acquire(1, "w2")
    assert isinstance(busy, NotAcquired) and busy.verdict == "busy"
    again, acq = await acquired(backend, "r1", "w1")  # the same worker (a re-sent acquire)
    assert (acq.epoch, acq.last_seq, acq.restarts) == (1, 2, 0)
    assert await again.commit(CommitStep(Outbox([ev()]))) == 3
    await backend.lose("w3")
    late = await backend.handle("r1", "w3")
    await backend.lose("w3")
    refused = await late.acquire(1, "w3")
    assert isinstance(refused, NotAcquired) and refused.verdict == "no_lease"


async def test_a_hand_back_queues_the_run_and_the_next_worker_resumes_it(backend: Backend) -> None:
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    await store.commit(CommitStep(Outbox([ev()], records=[("c1", done("c1").to_json())]), checkpoint=b"ck1"))
    assert await store.release(1) == "released"
    assert (await backend.held("r1")).status == "queued"
    with pytest.raises(FencedError):  # handed back: no longer its to write
        await store.commit(CommitStep(Outbox([ev()])))
    _, acq = await acquired(backend, "r1", "w2", gen=2)  # (the hand-back's dispatch)
    assert (acq.epoch, acq.last_seq, acq.checkpoint, acq.restarts) == (2, 2, b"ck1", 0)
    assert acq.tool_records == {"c1": done("c1")}


async def test_the_ending_commit_ends_the_run_and_writes_the_session_history(backend: Backend) -> None:
    await backend.submit("r1", session_id="s1")
    store, _ = await acquired(backend, "r1", "w1")
    session = SessionUpdate("s1", b'{"loop":1}', [("r1/c1", b'{"content":"ok"}')], [b'{"id":"r1/c1"}'])
    await store.commit(
        CommitStep(Outbox([ev()]), session=SessionUpdate("s1", b'{"loop":0}'))
    )  # not an ending
    assert await backend.history("s1") == History()
    result = b'{"status":"failed"}'
    seq = await store.commit(CommitStep(Outbox([ev("status", status="failed")]), status="failed", aux=result,
                             session=session, iterations=3, error_code="tool_error"))  # fmt: skip
    assert seq == 3
    held = await backend.held("r1")
    assert (held.status, held.result, held.iterations, held.error_code) == ("failed", result, 3, "tool_error")
    assert await backend.history("s1") == History(
        [b'{"loop":1}'], {"r1/c1": b'{"content":"ok"}'}, [b'{"id":"r1/c1"}']
    )
    with pytest.raises(FencedError):  # an ended run takes no more writes…
        await store.commit(CommitStep(Outbox([ev()])))
    assert await store.release(1) == "terminal"  # …is not handed back…
    ended = await (await backend.handle("r1", "w2")).acquire(2, "w2")
    assert ended == NotAcquired("terminal", "failed")  # …nor taken again
    assert (await backend.held("r1")).status == "failed"


async def test_a_run_parked_for_approval_keeps_its_approvals_for_the_next_worker(backend: Backend) -> None:
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    approvals = {"c1.0": {"decision": "pending", "name": "echo", "arguments": "{}"}}
    await store.commit(CommitStep(Outbox([ev("status", status="awaiting_human")]), checkpoint=b"ck1",
                       status="awaiting_human", aux=orjson.dumps(approvals), approval_timeout_ms=60_000))  # fmt: skip
    assert (await backend.held("r1")).status == "awaiting_human"
    with pytest.raises(FencedError):  # parked on no worker
        await store.commit(CommitStep(Outbox([ev()])))
    await backend.lose("w1")
    _, acq = await acquired(backend, "r1", "w2")
    assert (acq.approvals, acq.checkpoint, acq.epoch, acq.restarts) == (approvals, b"ck1", 2, 0)


def client_call(call_id: str, deadline_ms: int) -> tuple[str, bytes]:
    call = ToolCall(id=call_id, name="ask", arguments='{"q":1}')
    return call_id, ToolRecord.offered(call, deadline_ms, 1_000, called_at_ms=42).to_json()


def parked_on(*call_ids: str) -> bytes:
    return orjson.dumps([{"toolCallId": i, "name": "ask", "arguments": '{"q":1}'} for i in call_ids])


async def test_a_run_parked_for_client_calls_gives_the_ones_past_their_deadline_a_timeout(
    backend: Backend,
) -> None:
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    later = now_ms() + 60_000
    offered = [client_call("c1.0", later), client_call("c1.1", 1)]  # c1.1 is already past its deadline
    await store.commit(CommitStep(Outbox([ev("status", status="awaiting_tools")], records=offered), checkpoint=b"ck1",
                       status="awaiting_tools", aux=parked_on("c1.0", "c1.1")))  # fmt: skip
    held = await backend.held("r1")
    assert held.status == "awaiting_tools"
    assert held.tools["c1.0"] == ToolRecord.from_json(offered[0][1])  # still the caller's to answer
    timeout = ToolResult(tool_call_id="c1.1", name="ask", is_error=True,
                         content="error: the client returned no result within 1000 ms")  # fmt: skip
    assert held.tools["c1.1"] == ToolRecord(ToolState.DONE, client=True, timed_out=True, called_at_ms=42,
                                            result=timeout)  # fmt: skip
    with pytest.raises(FencedError):  # parked on no worker
        await store.commit(CommitStep(Outbox([ev()])))


async def test_a_run_whose_client_calls_are_all_settled_goes_straight_back_on_the_queue(
    backend: Backend,
) -> None:
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    await store.commit(CommitStep(Outbox([ev("status", status="awaiting_tools")], records=[client_call("c1.0", 1)]),
                       checkpoint=b"ck1", status="awaiting_tools", aux=parked_on("c1.0")))  # fmt: skip
    assert (await backend.held("r1")).status == "queued"
    _, acq = await acquired(backend, "r1", "w2", gen=2)  # (the resume's dispatch)
    assert acq.tool_records["c1.0"].timed_out and acq.tool_records["c1.0"].recorded is not None
    assert (acq.checkpoint, acq.epoch) == (b"ck1", 2)


async def test_a_client_calls_answer_is_the_runs_next_event_and_the_next_acquisition_names_it(
    backend: Backend,
) -> None:
    """The answer that leaves no call of the round open writes the first call's ``tool_result`` at the
    stream's next seq and queues the run; its next acquisition names that event (``answered``) and
    counts it in its last seq, so the resumed run leaves the machine's own out."""
    await backend.submit("r1")
    store, _ = await acquired(backend, "r1", "w1")
    offered = [client_call("c1.0", now_ms() + 60_000), client_call("c1.1", now_ms() + 60_000)]
    await store.commit(CommitStep(Outbox([ev("status", status="awaiting_tools")], records=offered), checkpoint=b"ck1",
                       status="awaiting_tools", aux=parked_on("c1.0", "c1.1")))  # fmt: skip
    parked = (await backend.held("r1")).events
    assert await backend.answer("r1", "c1.1", "second") == "recorded"  # c1.0 still open: nothing written
    assert (await backend.held("r1")).events == parked
    assert await backend.answer("r1", "c1.0", "12 open orders") == "resumed"
    held = await backend.held("r1")
    first = {"toolCallId": "c1.0", "name": "ask", "content": "12 open orders", "isError": False, "calledAt": 42}  # fmt: skip
    assert (held.status, held.events) == ("queued", [*parked, (3, "tool_result", first)])
    assert held.tools["c1.0"].recorded == ToolResult(tool_call_id="c1.0", name="ask", content="12 open orders")  # fmt: skip
    _, acq = await acquired(backend, "r1", "w2", gen=2)  # (the resume's dispatch)
    assert (acq.answered, acq.last_seq, acq.epoch, acq.checkpoint) == ("3:tool_result:c1.0", 3, 2, b"ck1")


async def test_an_abort_requested_while_running_is_handed_to_the_next_worker(backend: Backend) -> None:
    await backend.submit("r1")
    await acquired(backend, "r1", "w1")
    await backend.request_abort("r1", "stop it")
    await backend.lose("w1")  # it died before it read the request
    _, acq = await acquired(backend, "r1", "w2")
    assert (acq.abort_reason, acq.epoch, acq.restarts) == ("stop it", 2, 1)


def recorded(
    call_id: str, at: int, content: str, *, name: str = "echo", error: bool = False
) -> tuple[str, bytes]:
    result = ToolResult(tool_call_id=call_id, name=name, content=content, is_error=error)
    return call_id, ToolRecord.finished(1, 1, result, called_at_ms=at).to_json()


def kept(h: History) -> tuple[list[PastCall], dict[str, ToolResult]]:
    """A session's calls and results, as the readers parse them (the bytes differ: Lua's JSON is not
    pydantic's)."""
    calls = [PastCall.model_validate_json(c) for c in h.calls]
    return calls, {i: ToolResult.model_validate_json(r) for i, r in h.results.items()}


async def test_a_run_ended_outside_its_worker_leaves_the_calls_its_records_hold_in_its_session_once(
    backend: Backend,
) -> None:
    """What a worker's ending would leave (worker/core/sessions.py, from the same records), in the order
    the model made the calls: done calls only, the context tools' left out, errors as errors."""
    await backend.submit("r1", session_id="s1")
    store, _ = await acquired(backend, "r1", "w1")
    answered = ToolRecord(ToolState.DONE, client=True, name="ask", called_at_ms=300,  # the result names no tool
                          result=ToolResult(tool_call_id="c3.0", name="", content="yes"))  # fmt: skip
    records = [
        recorded("c10.0", 200, "tenth"), recorded("c2.1", 200, "a/b \"q\" é ✓", error=True, name="fail"),
        recorded("c1.0", 100, "first"), recorded("c2.0", 200, '{"hits": []}', name="search_history"),
        ("c3.0", answered.to_json()), client_call("c3.1", now_ms() + 60_000),
    ]  # fmt: skip
    await store.commit(CommitStep(Outbox([ev("status", status="awaiting_tools")], claims=["c9.0"], records=records),
                       checkpoint=b"ck1", status="awaiting_tools", aux=parked_on("c3.1")))  # fmt: skip
    assert await backend.history("s1") == History()  # parked: the session has nothing of it yet
    assert await backend.abort("r1", "enough") == "aborted"
    held = await backend.held("r1")
    assert (held.status, held.error_code, held.epoch) == ("aborted", "aborted", 2)
    got = await backend.history("s1")
    assert got.loops == []  # an aborted run's messages do not become a turn
    calls, results = kept(got)
    expected = sessions.session_calls("r1", held.tools)
    assert calls == [c for c, _ in expected] and results == {c.id: r for c, r in expected}
    assert [(c.id, c.name, c.is_error, c.called_at_ms) for c in calls] == [
        ("r1/c1.0", "echo", False, 100), ("r1/c2.1", "fail", True, 200), ("r1/c10.0", "echo", False, 200),
        ("r1/c3.0", "ask", False, 300),
    ]  # fmt: skip
    assert results["r1/c2.1"] == ToolResult(
        tool_call_id="c2.1", name="fail", content='a/b "q" é ✓', is_error=True
    )
    assert await backend.abort("r1", "again") == "finished"  # a repeat appends nothing
    with pytest.raises(FencedError):  # nor does a late ending of the worker that parked it
        await store.commit(CommitStep(Outbox([ev("status", status="aborted")]), status="aborted", aux=b"{}",
                           session=sessions.calls_update("s1", expected)))  # fmt: skip
    assert await backend.history("s1") == got
