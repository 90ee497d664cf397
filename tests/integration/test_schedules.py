"""Schedules in one process over a real Redis: the API's calls and tenant isolation,
racing firers, the catch-up rule and the overlap policies. The processes' test (three workers, two
API processes, an every-second cron, a firer SIGKILLed mid-firing) is tests/integration/test_schedule_fleet.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client import AsyncClient
from agentmill_client.errors import ApiError
from agentmill_client.schedules import ScheduleInput
from producer.listing import Catalog, RunFilter
from producer.schedules.firer import MIGRATE_EVERY, Firer
from producer.schedules.store import ScheduleStore, run_id_of
from shared import keys
from shared.fields import ScheduleField
from tests.integration.api_support import A, api, body, settings
from tests.integration.helpers import make_due, producer_for
from tests.support import forkserver

pytestmark = pytest.mark.integration

P = keys.Layout(1).parts[0]


async def test_the_api_creates_shows_lists_pauses_resumes_and_deletes_a_tenants_schedule(
    redis_url: str,
) -> None:
    s = settings(redis_url, schedules=False)  # nothing fires: this test is about the calls
    async with api(s) as url, AsyncClient(url, token="tok-a") as ca, AsyncClient(url, token="tok-b") as cb:
        made = await ca.create_schedule(
            ScheduleInput(schedule_id="nightly", cron="30 9 * * 1-5", timezone="Europe/Paris", input=body())
        )
        assert made.schedule_id == "nightly" and made.overlap == "skip" and made.catchup == 10
        paris = [datetime.fromtimestamp(t / 1000, ZoneInfo("Europe/Paris")) for t in made.next_fire_times]
        assert len(paris) == 5 and paris == sorted(paris) and paris[0].timestamp() > time.time()
        assert all((d.hour, d.minute, d.second) == (9, 30, 0) and d.weekday() < 5 for d in paris), paris
        again = await ca.create_schedule(
            ScheduleInput(schedule_id="nightly", cron="30 9 * * 1-5", timezone="Europe/Paris", input=body())
        )
        assert again.created_at == made.created_at
        with pytest.raises(ApiError) as conflict:
            await ca.create_schedule(ScheduleInput(schedule_id="nightly", cron="0 * * * *", input=body()))
        assert conflict.value.status == 409
        assert len((await ca.get_schedule("nightly", next=12)).next_fire_times) == 12

        # Another tenant: the same id is another schedule, and A's answers 404 to every call of B.
        for call in (cb.get_schedule, cb.delete_schedule, cb.pause_schedule, cb.resume_schedule):
            with pytest.raises(ApiError) as no:
                await call("nightly")
            assert (no.value.status, no.value.code) == (404, "unknown_schedule")
        assert (await cb.list_schedules()).schedules == []
        theirs = await cb.create_schedule(
            ScheduleInput(schedule_id="nightly", cron="* * * * *", input=body())
        )
        assert theirs.cron == "* * * * *" and (await ca.get_schedule("nightly")).cron == "30 9 * * 1-5"
        assert [v.schedule_id for v in (await ca.list_schedules()).schedules] == ["nightly"]

        assert (await ca.pause_schedule("nightly")).result == "paused"
        assert (await ca.pause_schedule("nightly")).result == "unchanged"
        paused = await ca.get_schedule("nightly")
        assert paused.paused and paused.next_fire_times == []
        due = Redis.from_url(redis_url)
        assert await due.zcard(P.schedules_due("tenant-a")) == 0  # B's only
        assert await due.zrange(P.schedules_due_tenants, 0, -1) == [b"tenant-b"]
        assert (await ca.resume_schedule("nightly")).result == "resumed"
        assert not (await ca.get_schedule("nightly")).paused
        assert (await ca.delete_schedule("nightly")).result == "deleted"
        with pytest.raises(ApiError) as gone:
            await ca.get_schedule("nightly")
        assert gone.value.status == 404
        assert (await cb.get_schedule("nightly")).cron == "* * * * *"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * *"}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"input": body(agent="nobody")}, "input.agent"),
        ({"input": body(runId="mine")}, "input.runId"),
        ({"scheduleId": "has:colon"}, "scheduleId"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"catchup": 0}, "catchup"),
    ],
)
async def test_a_schedule_that_cannot_fire_is_refused_naming_its_field(
    redis_url: str, change: dict[str, object], field: str
) -> None:
    async with (
        api(settings(redis_url, schedules=False)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as c,
    ):
        r = await c.post("/v1/schedules", json={"cron": "* * * * *", "input": body(), **change})
        # an agent its tenant does not have is not found (404), as on every route naming one
        assert r.status_code == (404 if field == "input.agent" else 422), r.text
        assert r.json()["error"]["field"] == field, r.text


async def _every_second(redis: Redis, redis_url: str, sid: str, **kw: object) -> ScheduleStore:
    p = producer_for(redis, redis_url)
    store = ScheduleStore(p)
    await store.create(ScheduleInput(schedule_id=sid, cron="* * * * * *", input=body(), **kw), "default", sid)  # type: ignore[arg-type]
    return store


async def _due_since(redis: Redis, sid: str, ago_ms: int) -> int:
    """Move the schedule's next firing ``ago_ms`` into the past (an outage): the firing it now is."""
    now_s, now_us = await redis.time()
    if now_us > 500_000:  # at least half a second before the clock turns: the caller's firing finds
        await asyncio.sleep((1_000_000 - now_us) / 1e6 + 0.01)  # the count of due firings it expects
        now_s, now_us = await redis.time()
    fire = (now_s * 1000 + now_us // 1000 - ago_ms) // 1000 * 1000
    await make_due(redis, P, sid, "default", fire)
    return int(fire)


async def _runs(redis: Redis, sid: str) -> list[str]:
    return sorted([k.decode()[len(P.run_prefix) :] async for k in redis.scan_iter(P.run(f"{sid}:*"))])


async def test_racing_firers_make_each_firing_once(redis: Redis, redis_url: str) -> None:
    store = await _every_second(redis, redis_url, "tick", overlap="enqueue")
    made = await store.get("tick", "default")
    assert made is not None
    first = made.next_fire_times[0]
    firers = [Firer(producer_for(redis, redis_url)) for _ in range(4)]
    stop = asyncio.Event()
    loops = [asyncio.create_task(f.run_forever(stop)) for f in firers]
    await asyncio.sleep(5.2)
    stop.set()
    await asyncio.gather(*loops)
    runs = await _runs(redis, "tick")
    expected = [run_id_of("tick", t) for t in range(first, int(time.time() * 1000) + 1, 1000)]
    assert set(runs) <= set(expected) and runs == expected[: len(runs)], (runs, expected)
    assert len(expected) - len(runs) <= 1  # the last may be due this very moment
    assert 4 <= len(runs) <= 7
    view = await store.get("tick", "default")
    assert view is not None and view.fired == len(runs) and view.last_run_id == runs[-1]
    rec = await producer_for(redis, redis_url).get(runs[0])
    assert rec is not None and rec.status == "queued"


@pytest.mark.parametrize(("catchup", "made"), [(3, 3), (10, 10), (1000, 31)])
async def test_after_an_outage_the_latest_missed_firings_are_made_up_to_catchup(
    redis: Redis, redis_url: str, catchup: int, made: int
) -> None:
    await _every_second(redis, redis_url, "tick", overlap="enqueue", catchup=catchup)
    first = await _due_since(redis, "tick", 30_000)
    assert await Firer(producer_for(redis, redis_url)).fire_due() == made
    runs = await _runs(redis, "tick")
    assert len(runs) == made
    view = await ScheduleStore(producer_for(redis, redis_url)).get("tick", "default")
    assert view is not None
    assert view.skipped == 31 - made and view.fired == made
    assert runs[-1] == view.last_run_id and run_id_of("tick", first + 30_000) == runs[-1]
    assert view.next_fire_times[0] > first + 30_000
    # Again: only firings that came due since (the clock moved on while 31 runs were made on a busy
    # machine), none of those already made.
    again = await Firer(producer_for(redis, redis_url)).fire_due()
    new = [r for r in await _runs(redis, "tick") if r not in runs]
    assert len(new) == again
    assert set(new) <= {
        run_id_of("tick", t) for t in range(first + 31_000, int(time.time() * 1000) + 1_001, 1000)
    }


@pytest.mark.parametrize(
    ("overlap", "statuses", "skipped"),
    [
        ("skip", ["queued"], 2),
        ("enqueue", ["queued", "queued", "queued"], 0),
        ("cancel_previous", ["aborted", "aborted", "queued"], 0),
    ],
)
async def test_overlap_decides_what_a_firing_does_while_the_previous_run_is_active(
    redis: Redis, redis_url: str, overlap: str, statuses: list[str], skipped: int
) -> None:
    await _every_second(redis, redis_url, "tick", overlap=overlap)
    await _due_since(redis, "tick", 2_000)  # three firings due; no worker: each run stays queued
    p = producer_for(redis, redis_url)
    await Firer(p).fire_due()
    runs = await _runs(redis, "tick")
    got = [(await p.get(r)) for r in runs]
    assert [r.status.value for r in got if r is not None] == statuses
    view = await ScheduleStore(p).get("tick", "default")
    assert view is not None and view.skipped == skipped and view.fired == len(statuses)


async def test_a_claimed_firing_whose_firer_died_is_made_once_the_claim_expires(
    redis: Redis, redis_url: str
) -> None:
    await _every_second(redis, redis_url, "tick", overlap="enqueue")
    fire = await _due_since(redis, "tick", 0)
    p = producer_for(redis, redis_url, schedule_lease_ms=800)
    claimed = await p.scripts.schedule_claim(
        keys=[P.schedules_due_tenants, P.schedules_due_before],
        args=[800, 100, P.schedules_due_prefix, P.schedule_prefix, 20],
    )
    assert [c.decode() for c in claimed[1:]] == ["tick", "default"]  # a firer claimed it, then died
    assert await Firer(p).fire_due() == 0  # claimed: no other firer takes it
    await asyncio.sleep(0.9)
    assert await Firer(p).fire_due() >= 1  # the claim expired: made, with what came due since
    assert run_id_of("tick", fire) in await _runs(redis, "tick")


async def test_a_schedule_an_older_version_left_in_its_one_due_set_fires_from_a_firers_first_look(
    redis: Redis, redis_url: str
) -> None:
    """Older versions kept every tenant's due schedules in one set: a firer moves them to their
    tenant's set at its first look, and at one look in MIGRATE_EVERY after that (an old API process
    of a rolling upgrade may still add to it); the looks between do not read it."""

    async def to_older_set(sid: str) -> int:
        fire = await _due_since(redis, sid, 0)
        await redis.zrem(P.schedules_due("default"), sid)
        await redis.zrem(P.schedules_due_tenants, "default")
        await redis.zadd(P.schedules_due_before, {sid: fire})
        return fire

    await _every_second(redis, redis_url, "old", overlap="enqueue")
    fire = await to_older_set("old")
    firer = Firer(producer_for(redis, redis_url))
    assert await firer.fire_due() >= 1  # its first look moved it, and made its firing
    assert run_id_of("old", fire) in await _runs(redis, "old")
    assert not await redis.exists(P.schedules_due_before)

    await _every_second(redis, redis_url, "later", overlap="enqueue")
    fire = await to_older_set("later")
    while firer.looks % MIGRATE_EVERY:  # the looks between leave the older set alone
        await firer.fire_due()
        assert await redis.zscore(P.schedules_due_before, "later") == fire
    await firer.fire_due()
    assert not await redis.exists(P.schedules_due_before)
    assert run_id_of("later", fire) in await _runs(redis, "later")


def _cli(redis_url: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return forkserver.run(["-m", "app.cli", "schedule", *args], input=stdin, text=False,
                          env={**os.environ, "REDIS_URL": redis_url}, timeout=60)  # fmt: skip


async def test_the_cli_manages_schedules_through_the_api_and_straight_on_redis(redis_url: str) -> None:
    template = orjson.dumps(body())
    async with api(settings(redis_url, schedules=False)) as url:
        via_api = ["--api", url, "--token", "tok-a"]
        made = await asyncio.to_thread(
            _cli, redis_url, "create", "-", "--id", "hourly", "--cron", "0 * * * *", "--json", *via_api,
            stdin=template,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        shown = orjson.loads(made.stdout)  # one JSON document, nothing else
        assert shown["scheduleId"] == "hourly" and len(shown["nextFireTimes"]) == 5
        other = await asyncio.to_thread(
            _cli, redis_url, "get", "hourly", "--next", "2", "--api", url, "--token", "tok-b"
        )
        assert other.returncode == 2 and b"no schedule hourly" in other.stderr, other
        # Straight on Redis, as tenant-a: the same schedule.
        direct = ["--tenant", "tenant-a"]
        paused = await asyncio.to_thread(_cli, redis_url, "pause", "hourly", *direct)
        assert paused.returncode == 0 and paused.stdout.strip() == b"paused", paused
        listed = await asyncio.to_thread(_cli, redis_url, "list", *via_api)
        assert listed.returncode == 0 and b"hourly  '0 * * * *' UTC  paused" in listed.stdout, listed
        gone = await asyncio.to_thread(_cli, redis_url, "delete", "hourly", *via_api)
        assert gone.returncode == 0 and gone.stdout.strip() == b"deleted", gone
        shown = await asyncio.to_thread(_cli, redis_url, "get", "hourly", *direct)
        assert shown.returncode == 2 and b"no such schedule" in shown.stderr, shown


async def test_schedules_live_at_their_homes_and_one_look_fires_every_partitions(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url, partitions=4, id_secret="test-id-secret")  # tenant-a: a named one
    store = ScheduleStore(p)
    ids = [f"s{i}" for i in range(8)]
    homes = {sid: store.where(sid, "tenant-a")[1] for sid in ids}
    assert len({h.index for h in homes.values()}) > 1
    for sid in ids:
        await store.create(ScheduleInput(schedule_id=sid, cron="* * * * * *", input=body()), "tenant-a", sid)
        key, home = store.where(sid, "tenant-a")
        assert await redis.hget(home.schedule(key), ScheduleField.CLIENT_ID) == sid.encode()
        assert await redis.zscore(home.schedule_index("tenant-a"), key) is not None
        await make_due(redis, home, key, "tenant-a", 0)  # due now
    assert await Firer(p).fire_due() == 8  # one run each: overlap skip while it is queued
    assert sorted(v.schedule_id for v in (await store.list("tenant-a"))[0]) == ids
    for sid in ids:
        view = await store.get(sid, "tenant-a")
        assert view is not None and view.fired == 1 and view.last_run_id is not None
        assert (await p.get(view.last_run_id, tenant="tenant-a")) is not None
        listed, _ = await Catalog(p).list_runs("tenant-a", RunFilter(metadata=(f"schedule={sid}",)))
        assert [r["runId"] for r in listed] == [view.last_run_id]  # its runs carry its id in their metadata
