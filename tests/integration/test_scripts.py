"""Each atomic script against a real redis-server, including the races."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from shared.fields import RunField
from shared.scripts import Scripts, text
from shared.settings import Settings
from tests.integration.helpers import producer_for, script_run, stream
from tests.support.schema import K, parts_of, tool_records
from worker.adapters.redis_store import RedisRunStore as RunStore
from worker.adapters.worker_beat import beat
from worker.core.acquisition import Acquired, NotAcquired
from worker.core.commit_step import CommitStep, Outbox
from worker.core.store_errors import FencedError, SeqConflictError
from worker.process.reconciler import reconcile_once

pytestmark = pytest.mark.integration


def ev(kind: str = "status", **payload: object) -> tuple[str, int, bytes]:
    return (kind, 1, orjson.dumps(payload or {"status": "running"}))


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, lease_ms=300, max_run_crashes=2, queued_check_ms=200)


async def new_run(redis: Redis, redis_url: str, rid: str = "r1") -> str:
    await producer_for(redis, redis_url, queued_check_ms=200).submit(script_run([{"text": "x"}], runId=rid))
    return rid


async def acquire(
    redis: Redis, settings: Settings, rid: str, worker: str, gen: int = 1
) -> tuple[RunStore, Acquired | NotAcquired]:
    """``worker`` takes (or renews) its lease of settings.lease_ms, then acquires the run."""
    scripts = Scripts.for_settings(redis, settings)
    await beat(parts_of(redis), scripts, worker, settings.lease_ms, register=True)
    store = RunStore(parts_of(redis), scripts, settings, K, rid)
    return store, await store.acquire(gen, worker)


async def test_compare_and_append_refuses_gaps_and_repeats(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    store, acq = await acquire(redis, settings, rid, "w1")
    assert isinstance(acq, Acquired) and acq.epoch == 1
    assert await store.commit(CommitStep(Outbox([ev(), ev("model_delta", text="a")]))) == 3  # the opening: 1
    store.last_seq = 0  # a writer that believes the stream is empty: a repeat of seq 1
    with pytest.raises(SeqConflictError):
        await store.commit(CommitStep(Outbox([ev()])))
    store.last_seq = 5  # a writer that skipped ahead: a gap
    with pytest.raises(SeqConflictError):
        await store.commit(CommitStep(Outbox([ev()])))
    assert [e.seq for e in await stream(redis, rid)] == [1, 2, 3]
    # Redis itself refuses an entry id at or below the last one.
    with pytest.raises(Exception, match="equal or smaller"):
        await redis.xadd(K.events(rid), {"seq": 3}, id="3-0")


async def test_events_checkpoint_claims_and_records_land_together(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    store, _ = await acquire(redis, settings, rid, "w1")
    await store.commit(CommitStep(Outbox([ev()], claims=["c1", "c2"]), checkpoint=b'{"seq":1,"state":{}}'))
    assert await redis.hlen(K.tools(rid)) == 0  # claims are the run's (one HSET a claiming commit)
    tools = await tool_records(redis, rid)
    assert tools == {
        "c1": {"state": "pending", "epoch": 1, "attempts": 1},
        "c2": {"state": "pending", "epoch": 1, "attempts": 1},
    }
    done = orjson.dumps(
        {
            "state": "done",
            "epoch": 1,
            "attempts": 1,
            "result": {"toolCallId": "c1", "name": "t", "content": "ok", "isError": False},
        }
    )
    await store.commit(
        CommitStep(Outbox([ev("tool_result")], records=[("c1", done)]), checkpoint=b'{"seq":2,"state":{}}')
    )
    assert await redis.hget(K.run(rid), "ckpt") == b'{"seq":2,"state":{}}'
    assert orjson.loads(await redis.hget(K.tools(rid), "c1"))["state"] == "done"
    assert await tool_records(redis, rid) == {"c1": orjson.loads(done), "c2": tools["c2"]}  # c2 still open


async def test_a_steps_claim_and_its_record_as_any_other_claims_and_records(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    """commit.lua writes a step's claims, and closes its one open claim, without decoding the
    claims' JSON: the same claims as the decoding way, which any other change still takes."""
    rid = await new_run(redis, redis_url)
    store, _ = await acquire(redis, settings, rid, "w1")
    await store.commit(CommitStep(Outbox([ev()], claims=["c1.0"])))
    one = await redis.hget(K.run(rid), RunField.CLAIMS)
    assert orjson.loads(one or b"") == {"c1.0": {"state": "pending", "epoch": 1, "attempts": 1}}
    other = orjson.dumps({"state": "done", "epoch": 1, "attempts": 1, "result": {"toolCallId": "x"}})
    await store.commit(CommitStep(Outbox([ev()], records=[("x", other)])))  # not the open claim's
    assert await redis.hget(K.run(rid), RunField.CLAIMS) == one
    done = orjson.dumps({"state": "done", "epoch": 1, "attempts": 1, "result": {"toolCallId": "c1.0"}})
    await store.commit(CommitStep(Outbox([ev("tool_result")], records=[("c1.0", done)])))
    assert await redis.hget(K.run(rid), RunField.CLAIMS) == b""
    assert await tool_records(redis, rid) == {"x": orjson.loads(other), "c1.0": orjson.loads(done)}
    # an id JSON escapes, a claim beside an open one, a claim and a record in one commit: decoded
    odd = 'call "q"\\é'
    await store.commit(CommitStep(Outbox([ev()], claims=[odd])))
    await store.commit(CommitStep(Outbox([ev()], claims=["c2.0", "c2.1"], records=[("c2.1", done)])))
    assert orjson.loads(await redis.hget(K.run(rid), RunField.CLAIMS) or b"") == {
        odd: {"state": "pending", "epoch": 1, "attempts": 1},
        "c2.0": {"state": "pending", "epoch": 1, "attempts": 1},
    }
    assert [e.seq for e in await stream(redis, rid)] == [1, 2, 3, 4, 5, 6]  # the opening, then the five


async def test_two_workers_acquiring_at_once_one_wins(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    results = await asyncio.gather(*(acquire(redis, settings, rid, f"w{i}") for i in range(8)))
    verdicts = [a for _, a in results]
    assert sum(isinstance(a, Acquired) for a in verdicts) == 1
    assert {a.verdict for a in verdicts if isinstance(a, NotAcquired)} == {"busy"}


async def test_a_stale_epoch_is_fenced_off_everywhere(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    old, _ = await acquire(redis, settings, rid, "w-old")
    await old.commit(CommitStep(Outbox([ev()], claims=["c1"])))
    await asyncio.sleep(0.35)  # the old worker is paused past its lease
    new, acq = await acquire(redis, settings, rid, "w-new")
    assert isinstance(acq, Acquired) and acq.epoch == 2 and acq.restarts == 1
    assert acq.tool_records["c1"].state == "pending"  # the new owner sees the dangling claim
    before = await redis.hgetall(K.run(rid))
    with pytest.raises(FencedError):
        await old.commit(
            CommitStep(
                Outbox([ev()], records=[("c1", b'{"state":"done"}')]),
                checkpoint=b"stale",
                status="completed",
                aux=b"{}",
            )
        )
    assert await redis.hgetall(K.run(rid)) == before
    assert (await tool_records(redis, rid))["c1"]["state"] == "pending"
    assert [e.seq for e in await stream(redis, rid)] == [1, 2]
    # The old worker's heartbeat is refused (its lease expired); the new owner's renews.
    assert (await beat(parts_of(redis), Scripts(redis), "w-old", 300)).lost
    renewed = await beat(parts_of(redis), Scripts(redis), "w-new", 300)
    assert not renewed.lost and renewed.workers == 1  # the expired w-old is not counted
    await new.commit(CommitStep(Outbox([ev()], claims=["c1"])))
    assert (await tool_records(redis, rid))["c1"] == {
        "state": "pending",
        "epoch": 2,
        "attempts": 2,
    }


async def test_two_workers_claiming_one_call_at_once_only_the_owner_wins(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    # Ten runs, each with a worker paused past its lease and the worker that took the run over,
    # both claiming tool call c1 in the same instant (twenty commits in flight together).
    rids = [await new_run(redis, redis_url, f"race{i}") for i in range(10)]
    olds = [(await acquire(redis, settings, r, "w-old"))[0] for r in rids]
    await asyncio.sleep(0.35)
    news = [(await acquire(redis, settings, r, "w-new"))[0] for r in rids]
    commits = []
    for i, (old, new) in enumerate(zip(olds, news, strict=True)):
        pair = [
            old.commit(CommitStep(Outbox([ev()], claims=["c1"]))),
            new.commit(CommitStep(Outbox([ev()], claims=["c1"]))),
        ]
        commits += pair[::-1] if i % 2 else pair
    results = await asyncio.gather(*commits, return_exceptions=True)
    assert sum(isinstance(r, FencedError) for r in results) == 10
    assert not [r for r in results if isinstance(r, BaseException) and not isinstance(r, FencedError)]
    for rid in rids:
        claim = (await tool_records(redis, rid))["c1"]
        assert claim == {"state": "pending", "epoch": 2, "attempts": 1}
        assert [e.seq for e in await stream(redis, rid)] == [1, 2]  # the opening and one event: the owner's


async def test_a_commit_sent_again_after_a_lost_reply_is_answered_not_refused(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    store, _ = await acquire(redis, settings, rid, "w")
    batch = Outbox([ev(step=1), ev(step=2)], claims=["c1"])
    assert await store.commit(CommitStep(batch, checkpoint=b"ck")) == 3  # after the opening (seq 1)
    store.last_seq = 1  # the reply was lost: the client sends the very same commit again
    assert await store.commit(CommitStep(batch, checkpoint=b"ck")) == 3
    assert [e.seq for e in await stream(redis, rid)] == [1, 2, 3]
    assert (await tool_records(redis, rid))["c1"]["attempts"] == 1  # not applied twice
    store.last_seq = 1  # a different batch at a stale position is still refused
    with pytest.raises(SeqConflictError):
        await store.commit(CommitStep(Outbox([ev(step=7), ev(step=8)])))
    with pytest.raises(SeqConflictError):
        await store.commit(CommitStep(Outbox([ev(step=1)])))


async def test_a_publish_sent_again_after_a_lost_reply_is_answered_not_refused(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    store, _ = await acquire(redis, settings, rid, "w")
    deltas = [ev("model_delta", text="a"), ev("model_delta", text="b")]
    assert await store.publish(deltas) == 3  # after the opening (seq 1)
    store.last_seq = 1  # the reply was lost: the client sends the very same publish again
    assert await store.publish(deltas) == 3
    assert [e.seq for e in await stream(redis, rid)] == [1, 2, 3]
    store.last_seq = 1  # other events at a stale position are still refused
    with pytest.raises(SeqConflictError):
        await store.publish([ev("model_delta", text="c"), ev("model_delta", text="d")])
    store.last_seq = 3
    assert await store.publish([ev("model_delta", text="c")]) == 4


def assert_quarantined(h: dict[bytes, bytes], events: list[Any], crashes: int) -> None:
    """Ended failed as poison_run, through the run's normal terminal path: one error event, then the
    terminal status, seqs 1..n without a gap or repeat."""
    assert h[b"status"] == b"failed" and int(h[RunField.CRASHES.encode()]) == crashes
    assert orjson.loads(h[b"result"])["lastError"]["code"] == "poison_run"
    assert [e.seq for e in events] == list(range(1, len(events) + 1)) and events[-1].terminal
    errors = [e for e in events if e.kind == "error"]
    assert len(errors) == 1 and errors[0].payload["code"] == "poison_run" and errors[0] is events[-2]


async def test_a_run_that_keeps_losing_its_worker_is_quarantined_at_its_next_acquire(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    for i in range(2):  # w0 and w1 take the run and die (their leases run out)
        store, acq = await acquire(redis, settings, rid, f"w{i}")
        assert isinstance(acq, Acquired) and acq.restarts == i
        await store.commit(CommitStep(Outbox([ev()])))
        await asyncio.sleep(0.35)
    _, acq = await acquire(redis, settings, rid, "w-last")  # w1's loss is the second: no third try
    assert isinstance(acq, NotAcquired) and acq.verdict == "exhausted"
    assert_quarantined(await redis.hgetall(K.run(rid)), await stream(redis, rid), crashes=2)
    assert await redis.zscore(K.live, rid) is None


async def test_the_lease_sweep_counts_each_lost_worker_once_and_quarantines_without_redispatching(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    scripts = Scripts.for_settings(redis, settings)
    rid = await new_run(redis, redis_url)
    for gen in (1, 2):
        store, acq = await acquire(redis, settings, rid, f"w{gen}", gen=gen)
        assert isinstance(acq, Acquired) and acq.restarts == gen - 1  # the sweep counted, not acquire
        await store.commit(CommitStep(Outbox([ev()])))
        await asyncio.sleep(0.35)
        sweeps = await asyncio.gather(*(reconcile_once(parts_of(redis), scripts, settings) for _ in range(3)))
        total = sum(sweeps, start=type(sweeps[0])())
        assert total["redispatched" if gen == 1 else "poison_run"] == 1, total  # once, whatever the sweeps
        assert int(await redis.hget(K.run(rid), RunField.CRASHES) or 0) == gen
    assert_quarantined(await redis.hgetall(K.run(rid)), await stream(redis, rid), crashes=2)
    assert await redis.zscore(K.queue, K.job_id(rid, 3)) is None  # not handed to a third worker
    assert await redis.zscore(K.live, rid) is None and not await redis.exists(K.worker_runs("w2"))


async def test_release_hands_back_without_counting_a_crash(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    store, _ = await acquire(redis, settings, rid, "w1")
    assert await store.release(1) == "released"
    assert await redis.zscore(K.queue, K.job_id(rid, 2)) is not None
    _, stale = await acquire(redis, settings, rid, "w2", gen=1)
    assert isinstance(stale, NotAcquired) and stale.verdict == "superseded"
    _, acq = await acquire(redis, settings, rid, "w2", gen=2)
    assert isinstance(acq, Acquired) and acq.restarts == 0 and acq.epoch == 2
    assert int(await redis.hget(K.run(rid), RunField.CRASHES) or 0) == 0


async def test_a_lost_hand_back_counts_a_crash_and_quarantines_at_the_budget(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    """release(lost=True), a run stopped on its worker's passed lease deadline: counted as the sweep
    counts a lapsed lease's run, once (a second try finds it moved), and at max_run_crashes ended."""
    rid = await new_run(redis, redis_url)
    for gen in (1, 2):
        store, acq = await acquire(redis, settings, rid, f"w{gen}", gen=gen)
        assert isinstance(acq, Acquired) and acq.restarts == gen - 1
        await store.commit(CommitStep(Outbox([ev()])))
        assert await store.release(gen, lost=True) == ("released" if gen == 1 else "poison_run")
        assert await store.release(gen, lost=True) == "fenced"  # moved on (queued; ended at a new epoch)
        assert not await redis.exists(K.worker_runs(f"w{gen}"))
    assert_quarantined(await redis.hgetall(K.run(rid)), await stream(redis, rid), crashes=2)
    assert await redis.zscore(K.queue, K.job_id(rid, 3)) is None


async def test_reconciler_redispatches_expired_and_lost_runs_once(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    scripts = Scripts(redis)
    crashed = await new_run(redis, redis_url, "crashed")
    await acquire(redis, settings, crashed, "w-dead")
    alive = await new_run(redis, redis_url, "alive")
    _store, _ = await acquire(redis, settings, alive, "w-live")
    lost = await new_run(redis, redis_url, "lost")
    await redis.delete(K.job_key(K.job_id("lost", 1)))  # as if Redis lost the job's write
    waiting = await new_run(redis, redis_url, "waiting")
    await beat(parts_of(redis), scripts, "w-live", 5_000)  # w-live keeps beating; w-dead's lease expires
    await asyncio.sleep(0.35)
    sweeps = await asyncio.gather(*(reconcile_once(parts_of(redis), scripts, settings) for _ in range(4)))
    total = sum(sweeps, start=type(sweeps[0])())
    assert total["redispatched"] == 2  # crashed + lost, each once despite four concurrent sweeps
    assert total["redispatched:lease_expired"] == 1 and total["redispatched:job_lost"] == 1  # why (metrics)
    assert total["worker_expired"] == 1  # w-dead is forgotten once its runs were handed on
    assert await redis.zscore(K.workers, "w-dead") is None
    assert not await redis.exists(K.worker_runs("w-dead"))
    assert await redis.smembers(K.worker_runs("w-live")) == {b"alive"}
    assert await redis.hget(K.run(crashed), "gen") == b"2"
    assert await redis.hget(K.run(lost), "gen") == b"2"
    assert await redis.hget(K.run(alive), "gen") == b"1"
    assert await redis.hget(K.run(waiting), "gen") == b"1"
    queue = {m.decode() for m in await redis.zrange(K.queue, 0, -1)}
    assert K.job_id("crashed", 2) in queue and K.job_id("crashed", 1) not in queue
    assert K.job_id("lost", 2) in queue and K.job_id("waiting", 1) in queue


async def test_a_claim_with_the_workers_lease_id_takes_its_runs_in_the_same_call(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    # One script a job: the claim acquires each run it claims (acquire_run.lua), so a worker's job
    # starts without an acquire round trip. Each run's verdict is the one acquire would give.
    p = producer_for(redis, redis_url)
    for rid in ("mine", "two"):
        await p.submit(script_run([{"text": "x"}], runId=rid))
    await redis.hset(K.run("two"), "gen", 2)  # redispatched meanwhile: its first job is superseded
    await redis.zadd(K.queue, {K.job_id("two", 2): 0})
    scripts = Scripts(redis)
    parts = parts_of(redis)

    async def claim(lease_id: str) -> list[Any]:
        t = await redis.time()
        now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
        ids = [K.job_id("mine", 1), K.job_id("two", 1), K.job_id("two", 2)]
        reply: list[Any] = await scripts.claim_jobs(
            *scripts.frame(
                K,
                [],
                [now_ms, 86_400_000, 10, K.in_progress_key(""), settings.lease_ms, 0, "", lease_id, *ids],
            )
        )
        return reply

    await beat(parts, scripts, "w-gone", 5_000, register=True)
    await redis.delete(K.worker_lease("w-gone"))  # its lease expired: it claims nothing
    assert await claim("w-gone") == []
    assert await redis.zcard(K.queue) == 3
    await beat(parts, scripts, "w-1", 5_000, register=True)
    reply = await claim("w-1")
    got = {r[0].decode(): [text(x) if isinstance(x, bytes) else x for x in r[2][:3]] for r in zip(
        reply[::3], reply[1::3], reply[2::3], strict=True
    )}  # fmt: skip
    assert got == {
        K.job_id("mine", 1): ["ok", "1", "1"],  # taken at epoch 1, opened: its running event
        K.job_id("two", 1): ["superseded", "2"],
        K.job_id("two", 2): ["ok", "1", "1"],
    }
    for rid in ("mine", "two"):
        assert await redis.hmget(K.run(rid), ["status", "owner"]) == [b"running", b"w-1"]
    assert await redis.smembers(K.worker_runs("w-1")) == {b"mine", b"two"}
    assert await redis.zcard(K.queue) == 0
    # The worker's driver then asks again, as an arq-started job does: the same answer, no new epoch.
    _, again = await acquire(redis, settings, "mine", "w-1")
    assert isinstance(again, Acquired) and again.epoch == 1
    # The store a claimed job starts with takes the claim's reply: no round trip. A worker that has
    # carried on under a new lease id since its claim takes the run again instead (here: busy, its
    # old id is still alive).
    mine = next(r for r in zip(reply[::3], reply[2::3], strict=True) if r[0] == K.job_id("mine", 1).encode())[
        1
    ]
    store = RunStore(parts, scripts, settings, K, "mine", claimed=("w-1", mine))
    taken = await store.acquire(1, "w-1")
    assert isinstance(taken, Acquired) and (taken.epoch, store.round_trips, store.lease_id) == (1, 0, "w-1")
    await beat(parts, scripts, "w-1~2", 5_000, register=True)
    store = RunStore(parts, scripts, settings, K, "mine", claimed=("w-1", mine))
    refused = await store.acquire(1, "w-1~2")
    assert isinstance(refused, NotAcquired) and refused.verdict == "busy" and store.round_trips == 1


async def test_a_claimed_run_whose_worker_died_before_its_lease_is_redispatched_after_one_lease(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    # Submitted with a queued check a minute away: without the claim script moving the check,
    # the run below would sit behind a dead worker's in-progress key for that minute.
    p = producer_for(redis, redis_url, queued_check_ms=60_000)
    for rid in ("orphan", "taken"):
        await p.submit(script_run([{"text": "x"}], runId=rid))
    scripts = Scripts(redis)
    t = await redis.time()
    now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
    claimed = await scripts.claim_jobs(
        *scripts.frame(
            K,
            [],
            [now_ms, 86_400_000, 10, K.in_progress_key(""), settings.lease_ms, 0, "", "",
             K.job_id("orphan", 1), K.job_id("taken", 1)],
        )
    )  # fmt: skip
    assert [c.decode() for c in claimed[::3]] == [K.job_id("orphan", 1), K.job_id("taken", 1)]
    assert claimed[2::3] == [[], []]  # claimed only: no lease id given
    # Claimed jobs leave arq's queue: later polls do not scan them again while they run.
    assert await redis.zcard(K.queue) == 0
    _, got = await acquire(redis, settings, "taken", "w-alive")
    assert isinstance(got, Acquired)  # "orphan" is never acquired: its worker died after the claim
    assert await reconcile_once(parts_of(redis), scripts, settings) == {}  # not due yet
    await beat(parts_of(redis), scripts, "w-alive", 5_000)
    await asyncio.sleep(settings.lease_ms / 1000 + 0.1)
    verdicts = await reconcile_once(parts_of(redis), scripts, settings)
    assert verdicts["redispatched"] == 1
    assert await redis.hget(K.run("orphan"), "gen") == b"2"
    assert await redis.hget(K.run("taken"), "gen") == b"1"
    # The dead claim's job, should its worker wake up, is refused; the new dispatch is taken.
    _, late = await acquire(redis, settings, "orphan", "w-dead", gen=1)
    assert isinstance(late, NotAcquired)
    _, fresh = await acquire(redis, settings, "orphan", "w-new", gen=2)
    assert isinstance(fresh, Acquired)


async def test_a_claim_given_no_ids_picks_the_due_jobs_itself_in_queue_order(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    # A worker's poll sends no ids: the script reads the queue a page at a time, claims up to its
    # limit in the queue's order, and skips a job whose in-progress key is held (it stays queued).
    p = producer_for(redis, redis_url)
    for i, rid in enumerate(("a", "b", "c", "d", "e")):
        await p.submit(script_run([{"text": "x"}], runId=rid, priority=9 - i))  # a first, e last
    order = [m.decode() for m in await redis.zrange(K.queue, 0, -1)]
    assert order == [K.job_id(r, 1) for r in "abcde"]
    await redis.set(K.in_progress_key(K.job_id("b", 1)), "1")  # another's, from arq's own start
    scripts = Scripts(redis)

    async def claim(limit: int) -> list[str]:
        t = await redis.time()
        now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
        args = [now_ms, 86_400_000, limit, K.in_progress_key(""), settings.lease_ms, 0, "", ""]
        reply: list[Any] = await scripts.claim_jobs(*scripts.frame(K, [], args))
        return [r.decode() for r in reply[::3]]

    assert await claim(2) == [K.job_id("a", 1), K.job_id("c", 1)]
    assert await claim(0) == []
    assert await claim(10) == [K.job_id("d", 1), K.job_id("e", 1)]
    assert [m.decode() for m in await redis.zrange(K.queue, 0, -1)] == [K.job_id("b", 1)]


async def test_abort_verdicts(redis: Redis, redis_url: str, settings: Settings) -> None:
    p = producer_for(redis, redis_url)
    assert await p.abort("nobody") == "unknown"
    queued = await new_run(redis, redis_url, "q")
    assert await p.abort(queued) == "aborted"
    events = await stream(redis, queued)
    assert events[-1].payload["status"] == "aborted"
    assert await p.abort(queued) == "finished"
    running = await new_run(redis, redis_url, "run")
    store, _ = await acquire(redis, settings, running, "w1")
    assert await p.abort(running, reason="stop it") == "requested"
    # The request reaches the owning worker through its next heartbeat, with the run's epoch.
    assert (await beat(parts_of(redis), Scripts(redis), "w1", 300)).aborts == [
        (running, store.epoch, "stop it")
    ]
    assert (await beat(parts_of(redis), Scripts(redis), "w1", 300)).aborts == []  # delivered once
    assert await redis.hget(K.run(running), "abort") == b"stop it"  # the hash stays the truth
    assert await p.abort(running, tenant="someone-else") == "unknown"


async def test_an_early_check_of_an_approval_wait_keeps_its_deadline_watched(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    """The live index holds a parked run at the earlier of its approval timeout and run deadline; a
    check that comes before it (the sweeper's clock runs ahead of Redis's) leaves the entry in place."""
    from worker.process.reconciler import _redispatch

    rid = await new_run(redis, redis_url)
    store, _ = await acquire(redis, settings, rid, "w1")
    deadline = int((await redis.time())[0]) * 1000 + 60_000
    approvals = {"a": {"decision": "pending", "name": "t", "arguments": "{}"}}
    await store.commit(CommitStep(Outbox([ev()]), status="awaiting_human", aux=orjson.dumps(approvals),
                       approval_timeout_ms=600_000, run_deadline_ms=deadline))  # fmt: skip
    assert await redis.zscore(K.live, rid) == deadline
    assert (await _redispatch(parts_of(redis), Scripts(redis), settings, K, [rid]))["awaiting"] == 1
    assert await redis.zscore(K.live, rid) == deadline
    assert await redis.hget(K.run(rid), "status") == b"awaiting_human"


async def test_approval_decisions(redis: Redis, redis_url: str, settings: Settings) -> None:
    p = producer_for(redis, redis_url)
    rid = await new_run(redis, redis_url)
    store, _ = await acquire(redis, settings, rid, "w1")
    assert await p.settle_approval(rid, "a", approved=True) == "not_awaiting"
    approvals = {
        "a": {"decision": "pending", "name": "t", "arguments": "{}"},
        "b": {"decision": "pending", "name": "t", "arguments": "{}"},
    }
    await store.commit(CommitStep(Outbox([ev()]), status="awaiting_human", aux=orjson.dumps(approvals)))
    rec = await p.get(rid)
    assert rec is not None and [a["toolCallId"] for a in rec.pending_approvals] == ["a", "b"]
    assert await p.settle_approval(rid, "zzz", approved=True) == "unknown_call"
    assert await p.settle_approval(rid, "a", approved=True) == "recorded"
    assert await p.settle_approval(rid, "a", approved=False) == "already_decided"
    assert await redis.zscore(K.queue, K.job_id(rid, 2)) is None
    assert await p.settle_approval(rid, "b", approved=False, reason="no") == "resumed"
    assert await redis.zscore(K.queue, K.job_id(rid, 2)) is not None
    stored = orjson.loads(await redis.hget(K.run(rid), "approvals"))
    assert stored["a"]["decision"] == "approved" and stored["b"] == {
        "decision": "rejected",
        "name": "t",
        "arguments": "{}",
        "reason": "no",
    }


async def test_a_finished_run_leaves_its_worker(redis: Redis, redis_url: str, settings: Settings) -> None:
    rid = await new_run(redis, redis_url)
    store, _ = await acquire(redis, settings, rid, "w1")
    assert await redis.smembers(K.worker_runs("w1")) == {rid.encode()}
    assert await redis.zscore(K.live, rid) is None  # running: watched through w1's lease
    await store.commit(CommitStep(Outbox([ev(status="completed")]), status="completed", aux=b"{}"))
    assert await redis.zscore(K.live, rid) is None
    assert await redis.smembers(K.worker_runs("w1")) == set()
    await asyncio.sleep(0.35)  # w1's lease expires: the sweep finds nothing of it to re-dispatch
    verdicts = await reconcile_once(parts_of(redis), Scripts(redis), settings)
    assert verdicts == {"worker_expired": 1} and await redis.hget(K.run(rid), "status") == b"completed"


async def test_a_worker_without_a_live_lease_cannot_acquire_or_commit(
    redis: Redis, redis_url: str, settings: Settings
) -> None:
    rid = await new_run(redis, redis_url)
    store = RunStore(parts_of(redis), Scripts(redis), settings, K, rid)
    assert await store.acquire(1, "never-registered") == NotAcquired("no_lease", "never-registered")
    store, acq = await acquire(redis, settings, rid, "w1")
    assert isinstance(acq, Acquired)
    await store.commit(CommitStep(Outbox([ev()])))
    await asyncio.sleep(0.35)  # w1 paused past its lease; nobody has taken the run over yet
    with pytest.raises(FencedError):  # Redis refuses the write all the same
        await store.commit(CommitStep(Outbox([ev()])))
    assert [e.seq for e in await stream(redis, rid)] == [1, 2]
    # Its runs go back on the queue in one sweep, whatever their number: one lease, one check.
    assert (await reconcile_once(parts_of(redis), Scripts(redis), settings))["redispatched"] == 1
    assert await redis.hget(K.run(rid), "gen") == b"2"


async def test_an_append_to_a_missing_run_is_answered_before_its_events_are_read(redis: Redis) -> None:
    """commit.lua and publish.lua answer 'missing' from the run hash alone: bench figure 3d times a
    commit of a missing run with its first arguments only (the gate's cost, nothing else)."""
    scripts = Scripts(redis)
    k, a = scripts.frame(K, [K.run("nope")], [1, 1, "w", "nope", ""])
    assert [text(x) for x in await scripts.commit(keys=k, args=a)] == ["missing"]
    k, a = scripts.frame(K, [*K.run_keys("nope")[:2], K.worker_lease("w")], [1, 1, "w"])
    assert [text(x) for x in await scripts.publish(keys=k, args=a)] == ["missing"]
