"""Schedules kept inside their tenant's quotas and fired fairly across tenants, over a real Redis:
one tenant's backlog of every-second schedules does not delay another tenant's firing beyond a look,
the caps on schedules, firings per minute and template size, a tenant whose token is removed, whose
day budget is spent or whose quota disables it held and resumed, the schedules past a lowered
maxSchedules held (the oldest fire), two API processes with different
tokens keeping both tenants' schedules firing, and the firing lag read from the API's /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from redis.asyncio import Redis

from agentmill_client import limits
from agentmill_client.schedules import ScheduleInput
from producer.schedules.firer import CLAIM_LIMIT, Firer
from producer.schedules.lag import LAG_BUCKETS, FiringLag
from producer.schedules.store import ScheduleStore
from shared.clock import utc_day
from shared.fields import BudgetField
from shared.settings import Settings
from tests.integration.api_support import A, B, api, body, settings
from tests.integration.helpers import make_due, metric_samples, producer_for
from tests.support.procs import WorkerProc
from tests.support.redis_server import free_port
from tests.support.waits import until

pytestmark = pytest.mark.integration

SECRET = "test-id-secret"
LAG = "agentmill_schedule_firing_lag_seconds"
# How late another tenant's firing may be while one tenant has a backlog: a look's wait (200 ms,
# ±20 %) plus one look's work (at most CLAIM_LIMIT firings of the tenant with the backlog), on this
# shared test machine; without the fair claim the firing waits behind the whole backlog.
BOUND_S = 1.0  # a bucket of LAG_BUCKETS


def _lags(registry: CollectorRegistry, tenant: str) -> dict[float, float]:
    """The tenant's lag histogram as scraped: {bucket upper bound: firings at most that late}."""
    samples = metric_samples(generate_latest(registry).decode())
    return {
        float(dict(labels)["le"]): v
        for (name, labels), v in samples.items()
        if name == LAG + "_bucket" and dict(labels).get("tenant") == tenant
    }


async def test_one_tenants_backlog_does_not_delay_another_tenants_firings(
    redis: Redis, redis_url: str
) -> None:
    uncapped = {"id_secret": SECRET, "tenant_max_schedules": 0, "tenant_schedule_firings_per_minute": 0}
    p = producer_for(redis, redis_url, **uncapped)
    store = ScheduleStore(p)
    every_second = ScheduleInput(cron="* * * * * *", input=body(), overlap="enqueue")  # type: ignore[arg-type]
    for i in range(400):  # tenant-a: 400 every-second schedules, far more firings than a firer makes
        await store.create(every_second, "tenant-a", f"a{i}")
    await store.create(
        ScheduleInput(cron="*/2 * * * * *", input=body(), overlap="enqueue"),  # type: ignore[arg-type]
        "tenant-b", "b",
    )  # fmt: skip
    registry = CollectorRegistry()
    lag = FiringLag(registry)
    firers = [Firer(producer_for(redis, redis_url, **uncapped), lag=lag) for _ in range(2)]
    stop = asyncio.Event()
    loops = [asyncio.create_task(f.run_forever(stop)) for f in firers]
    await asyncio.sleep(8)
    stop.set()
    await asyncio.gather(*loops)

    a, b = _lags(registry, "tenant-a"), _lags(registry, "tenant-b")
    print(f"\nfirings made, by lag bucket (s): tenant-a {a}\ntenant-b {b}")
    assert a[float("inf")] > CLAIM_LIMIT and a[BOUND_S] < a[float("inf")]  # tenant-a had a backlog
    assert b[float("inf")] >= 3  # tenant-b fired every two seconds meanwhile…
    assert b[BOUND_S] == b[float("inf")], b  # …each within the bound of its due time
    view = await store.get("b", "tenant-b")
    assert view is not None and view.fired == b[float("inf")] and view.skipped == 0


async def test_a_tenants_schedule_count_and_template_size_are_capped_at_creation(redis_url: str) -> None:
    async with (
        api(settings(redis_url, schedules=False, tenant_max_schedules=3)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as c,
    ):
        for i in range(3):
            made = await c.post(
                "/v1/schedules", json={"scheduleId": f"s{i}", "cron": "* * * * *", "input": body()}
            )
            assert made.status_code == 201, made.text
        over = await c.post("/v1/schedules", json={"scheduleId": "s3", "cron": "* * * * *", "input": body()})
        assert over.status_code == 429, over.text
        err = over.json()["error"]
        assert err["code"] == "schedule_quota_exceeded" and "3 schedules" in err["message"], err
        assert "maxSchedules" in err["message"] and "AGENTMILL_TENANT_MAX_SCHEDULES" in err["message"], err
        again = await c.post("/v1/schedules", json={"scheduleId": "s0", "cron": "* * * * *", "input": body()})
        assert again.status_code == 200, again.text  # the same schedule again is no new one
        assert (await c.delete("/v1/schedules/s0")).status_code == 200
        room = await c.post("/v1/schedules", json={"scheduleId": "s3", "cron": "* * * * *", "input": body()})
        assert room.status_code == 201, room.text

        big = body(inputMessages=[{"role": "user", "content": "x" * 40_000}] * 2)  # 80 KB: a run takes it
        assert (await c.post("/v1/runs", json=big)).status_code in (200, 201, 202)
        await c.delete("/v1/schedules/s3")
        r = await c.post("/v1/schedules", json={"scheduleId": "big", "cron": "* * * * *", "input": big})
        assert r.status_code == 413, r.text
        err = r.json()["error"]
        assert err["code"] == "too_large" and err["field"] == "input", err
        assert str(limits.MAX_SCHEDULE_INPUT_BYTES) in err["message"], err


async def test_an_end_time_stops_the_firings(redis: Redis, redis_url: str) -> None:
    p = producer_for(redis, redis_url)
    store = ScheduleStore(p)
    now_s = int(time.time())
    view, _ = await store.create(
        ScheduleInput(cron="* * * * * *", input=body(), overlap="enqueue", endAt=(now_s + 3) * 1000),  # type: ignore[arg-type]
        "default", "brief",
    )  # fmt: skip
    assert view.end_at == (now_s + 3) * 1000 and 1 <= len(view.next_fire_times) <= 3
    assert max(view.next_fire_times) <= (now_s + 3) * 1000
    key, home = store.where("brief", "default")
    await make_due(redis, home, key, "default", now_s * 1000 - 5_000)  # due since 5 s
    await asyncio.sleep(max(0.0, now_s + 3.2 - time.time()))
    made = await Firer(p).fire_due()
    assert 1 <= made <= 9  # the catch-up's firings up to its end, none after
    view2 = await store.get("brief", "default")
    assert view2 is not None and view2.next_fire_times == [] and view2.fired == made
    assert await Firer(p).fire_due() == 0  # out of the due set for good
    past = await store.create(
        ScheduleInput(cron="* * * * *", input=body(), endAt=1000),
        "default",
        "over",  # type: ignore[arg-type]
    )
    assert past[0].next_fire_times == []


async def _fired_within(firer: Firer, seconds: float) -> int:
    """Look for due schedules every 50 ms until a look makes runs (or ``seconds`` pass): the runs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if made := await firer.fire_due():
            return made
        await asyncio.sleep(0.05)
    return 0


async def _quiet_minute(redis: Redis) -> None:
    """Wait until Redis's clock is at least 5 s from a minute's turn (the per-minute count resets)."""
    s, _ = await redis.time()
    if s % 60 > 54:
        await asyncio.sleep(61 - s % 60)


async def test_firings_past_the_tenants_per_minute_cap_are_skipped_and_counted(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url, tenant_schedule_firings_per_minute=5)
    store = ScheduleStore(p)
    every_second = ScheduleInput(cron="* * * * * *", input=body(), overlap="enqueue")  # type: ignore[arg-type]
    await _quiet_minute(redis)
    for sid in ("one", "two"):
        await store.create(every_second, "default", sid)
    s, _ = await redis.time()
    await make_due(
        redis, *store.where("one", "default")[::-1], "default", (s - 20) * 1000
    )  # ten firings to make (catchup 10)
    assert await Firer(p).fire_due() == 5
    one = await store.get("one", "default")
    assert one is not None and one.fired == 5 and one.skipped >= 5 + 10, one
    assert one.last_error is not None and "schedule_rate_exceeded" in one.last_error
    assert "scheduleFiringsPerMinute" in one.last_error and "5 firings this minute" in one.last_error
    await make_due(redis, *store.where("two", "default")[::-1], "default", s * 1000)
    assert await Firer(p).fire_due() == 0  # the same tenant's other schedule: the minute is spent
    two = await store.get("two", "default")
    assert two is not None and two.fired == 0 and two.skipped >= 1 and two.last_error is not None
    assert two.next_fire_times[0] > s * 1000  # skipped, not made later


async def test_a_tenant_whose_token_is_removed_has_its_schedules_held_until_it_is_back(
    redis: Redis, redis_url: str
) -> None:
    s = settings(redis_url, schedules=False, id_secret=SECRET, schedule_lease_ms=200, live_tenants_ttl_ms=300)
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        made = await c.post(
            "/v1/schedules", json={"scheduleId": "tick", "cron": "* * * * * *", "input": body()}
        )
        assert made.status_code == 201, made.text
    p = producer_for(redis, redis_url, id_secret=SECRET, schedule_lease_ms=200)
    store = ScheduleStore(p)
    key, home = store.where("tick", "tenant-a")
    firer = Firer(p)

    # tenant-a's token removed: the API started again without it names tenant-b alone, and once
    # the TTL of the last word naming tenant-a has passed, tenant-a is not live.
    without_a = Settings(redis_url=redis_url, api_tokens="tok-b=tenant-b", schedules=False, id_secret=SECRET,
                         live_tenants_ttl_ms=300)  # fmt: skip
    async with api(without_a):
        await asyncio.sleep(0.4)
    await make_due(redis, home, key, "tenant-a", 0)
    assert await firer.fire_due() == 0
    held = await store.get("tick", "tenant-a")
    assert held is not None and held.paused and held.next_fire_times == [] and held.fired == 0
    assert held.paused_reason is not None and "tenant-a" in held.paused_reason
    assert held.paused_reason.startswith("token: ") and "no API token" in held.paused_reason
    await asyncio.sleep(0.3)  # looked at again a lease later: still held
    assert await firer.fire_due() == 0
    assert [k async for k in redis.scan_iter(home.run("*"))] == []

    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:  # the token is back
        shown = (await c.get("/v1/schedules/tick")).json()
        assert shown["paused"] and "no API token" in shown["pausedReason"]  # until a firer looks again
        await asyncio.sleep(0.3)
        assert await firer.fire_due() == 0  # resumed from its next firing after now
        assert await _fired_within(firer, 2.5) >= 1  # from its next firing after the look that resumed it
        shown = (await c.get("/v1/schedules/tick")).json()
        assert not shown["paused"] and shown["pausedReason"] is None and shown["fired"] >= 1, shown


async def test_the_firing_lag_of_each_tenant_is_scraped_from_the_api(redis_url: str) -> None:
    s = settings(redis_url, id_secret=SECRET, schedule_poll_ms=50)
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        made = await c.post("/v1/schedules", json={"scheduleId": "tick", "cron": "* * * * * *", "input": body(),
                                                   "overlap": "enqueue"})  # fmt: skip
        assert made.status_code == 201, made.text
        await asyncio.sleep(2.5)
        samples = metric_samples((await c.get("/metrics")).text)
    count = samples[(LAG + "_count", (("tenant", "tenant-a"),))]
    assert count >= 2
    within = samples[(LAG + "_bucket", (("le", str(float(LAG_BUCKETS[5]))), ("tenant", "tenant-a")))]
    assert within == count  # an idle pool fires within LAG_BUCKETS[5] (2 s) of the due time


async def test_a_tenant_whose_day_budget_is_spent_has_its_schedules_held_until_the_next_utc_day(
    redis: Redis, redis_url: str
) -> None:
    quotas = orjson.dumps({"tenant-a": {"tokensPerDay": 100}}).decode()
    p = producer_for(redis, redis_url, id_secret=SECRET, schedule_lease_ms=200, tenant_quotas=quotas)
    store = ScheduleStore(p)
    await store.create(
        ScheduleInput(cron="* * * * * *", input=body(), overlap="enqueue"),  # type: ignore[arg-type]
        "tenant-a", "tick",
    )  # fmt: skip
    key, home = store.where("tick", "tenant-a")
    now = await _redis_ms(redis)
    today = p.parts.home("tenant-a").tenant_budget("tenant-a", utc_day(now))
    await redis.hset(today, BudgetField.SPENT_TOKENS, 100)  # the day's counter as budget.lua keeps it
    firer = Firer(p)
    await make_due(redis, home, key, "tenant-a", now - 3_000)
    assert await firer.fire_due() == 0
    held = await store.get("tick", "tenant-a")
    assert held is not None and held.paused and held.fired == 0 and held.skipped >= 3, held
    assert held.paused_reason is not None and held.paused_reason.startswith("budget: "), held.paused_reason
    assert "has spent 100 of its 100 tokensPerDay" in held.paused_reason
    assert utc_day(now) in held.paused_reason and "00:00 UTC" in held.paused_reason
    await asyncio.sleep(0.3)  # looked at again a lease later: still held
    assert await firer.fire_due() == 0
    assert [k async for k in redis.scan_iter(home.run("*"))] == []

    # The UTC day turns: today's counters become the day before's, and the new day's start at zero.
    yesterday = p.parts.home("tenant-a").tenant_budget("tenant-a", utc_day(now - 86_400_000))
    await redis.rename(today, yesterday)
    assert await _fired_within(firer, 2.5) >= 1
    view = await store.get("tick", "tenant-a")
    assert view is not None and not view.paused and view.paused_reason is None and view.fired >= 1, view


async def test_a_disabled_tenant_is_refused_403_and_its_schedules_are_held(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url, id_secret=SECRET, schedule_lease_ms=200)
    store = ScheduleStore(p)
    await store.create(
        ScheduleInput(cron="* * * * * *", input=body(), overlap="enqueue"),  # type: ignore[arg-type]
        "tenant-b", "tick",
    )  # fmt: skip
    key, home = store.where("tick", "tenant-b")
    quotas = orjson.dumps({"tenant-b": {"disabled": True}}).decode()
    s = settings(redis_url, schedules=False, id_secret=SECRET, tenant_quotas=quotas)
    async with (
        api(s) as url,
        httpx.AsyncClient(base_url=url, headers=B) as cb,
        httpx.AsyncClient(base_url=url, headers=A) as ca,
    ):
        for path, sent in (
            ("/v1/runs", body()),
            ("/v1/runs/batch", {"runs": [body(), body()]}),
            ("/v1/schedules", {"scheduleId": "new", "cron": "* * * * *", "input": body()}),
        ):
            r = await cb.post(path, json=sent)
            assert r.status_code == 403, (path, r.text)
            err = r.json()["error"]
            assert err["code"] == "tenant_disabled" and '"disabled": true' in err["message"], (path, err)
        assert (await ca.post("/v1/runs", json=body())).status_code == 202  # another tenant is not affected
        runs = {k async for k in redis.scan_iter(home.run("*"))}

        disabled = Firer(producer_for(redis, redis_url, id_secret=SECRET, schedule_lease_ms=200,
                                      tenant_quotas=quotas))  # fmt: skip
        await make_due(redis, home, key, "tenant-b", await _redis_ms(redis) - 2_000)
        assert await disabled.fire_due() == 0
        shown = (await cb.get("/v1/schedules/tick")).json()
        assert shown["paused"] and shown["fired"] == 0 and shown["skipped"] >= 2, shown
        assert shown["pausedReason"].startswith("disabled: ") and "tenant-b" in shown["pausedReason"], shown
    assert {k async for k in redis.scan_iter(home.run("*"))} == runs  # none made
    await asyncio.sleep(0.3)
    assert await _fired_within(Firer(p), 2.5) >= 1  # enabled again (a quota without "disabled")
    view = await store.get("tick", "tenant-b")
    assert view is not None and not view.paused and view.fired >= 1, view


async def test_schedules_past_a_lowered_max_schedules_are_held_the_oldest_fire(
    redis: Redis, redis_url: str
) -> None:
    p = producer_for(redis, redis_url, id_secret=SECRET, schedule_lease_ms=200)
    store = ScheduleStore(p)
    names = ["first", "second", "third"]
    for name in names:  # made under the default cap (100), each a few ms after the last
        await store.create(
            ScheduleInput(cron="* * * * * *", input=body(), overlap="enqueue"),  # type: ignore[arg-type]
            "tenant-b", name,
        )  # fmt: skip
        await asyncio.sleep(0.01)
    lowered = orjson.dumps({"tenant-b": {"maxSchedules": 2}}).decode()
    firer = Firer(
        producer_for(redis, redis_url, id_secret=SECRET, schedule_lease_ms=200, tenant_quotas=lowered)
    )

    async def due_now() -> None:
        for name in names:
            if await store.get(name, "tenant-b") is not None:
                key, home = store.where(name, "tenant-b")
                await make_due(redis, home, key, "tenant-b", await _redis_ms(redis) - 1_500)

    await due_now()
    assert await firer.fire_due() >= 2  # the two oldest
    views = {n: await store.get(n, "tenant-b") for n in names}
    assert all(v is not None for v in views.values())
    first, second, third = (views[n] for n in names)
    assert first is not None and second is not None and third is not None
    assert first.fired >= 1 and second.fired >= 1 and not first.paused and not second.paused
    assert third.fired == 0 and third.paused and third.skipped >= 1, third
    assert third.paused_reason is not None and third.paused_reason.startswith("quota: "), third
    assert "maxSchedules (2" in third.paused_reason
    # back within its cap: the third fires again from its next firing (here: made due again)
    assert await store.delete("first", "tenant-b")
    await asyncio.sleep(0.3)  # its hold's lease (200 ms) passed: looked at again
    await firer.fire_due()  # lifts the hold (from its next firing)
    deadline = time.monotonic() + 5.0
    while (third := await store.get("third", "tenant-b")) is not None and not third.fired:
        assert time.monotonic() < deadline, third
        await due_now()
        await firer.fire_due()
        await asyncio.sleep(0.05)
    assert third is not None and third.fired >= 1 and not third.paused, third


async def _redis_ms(redis: Redis) -> int:
    s, us = await redis.time()
    return int(s) * 1000 + int(us) // 1000


async def _ready(url: str, within: float = 60.0) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=2.0) as c:
        for _ in range(int(within * 10)):
            with contextlib.suppress(httpx.TransportError):
                if (await c.get("/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never became ready")


async def test_two_api_processes_with_different_tokens_both_keep_their_tenants_schedules_firing(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """API process A names tenant-a, B (started after A) tenant-b; both fire schedules. Both
    tenants' schedules fire; once A stops, tenant-a's are held after the TTL, tenant-b's go on."""
    ttl_ms = 1000
    env = {"AGENTMILL_ID_SECRET": SECRET, "AGENTMILL_LIVE_TENANTS_TTL_MS": str(ttl_ms),
           "AGENTMILL_SCHEDULE_LEASE_MS": "300"}  # fmt: skip
    ports = {"tenant-a": free_port(), "tenant-b": free_port()}
    procs = {
        t: WorkerProc(redis_url, argv=["-m", "app.cli", "api"], log=tmp_path / f"api-{t}.log",
                      env={**env, "AGENTMILL_API_PORT": str(port), "AGENTMILL_API_TOKENS": f"tok-{t[-1]}={t}"})
        for t, port in ports.items()
    }  # fmt: skip
    store = ScheduleStore(producer_for(redis, redis_url, id_secret=SECRET))
    try:
        for t in ("tenant-a", "tenant-b"):  # one after the other: B's word comes after A's
            procs[t].start()
            await _ready(f"http://127.0.0.1:{ports[t]}")
        for t, headers in (("tenant-a", A), ("tenant-b", B)):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[t]}", headers=headers) as c:
                made = await c.post("/v1/schedules", json={"scheduleId": "tick", "cron": "* * * * * *",
                                                           "input": body(), "overlap": "enqueue"})  # fmt: skip
                assert made.status_code == 201, made.text

        async def fired(tenant: str) -> int:
            view = await store.get("tick", tenant)
            return view.fired if view is not None else 0

        async def both_fired_twice() -> bool:
            return min([await fired(t) for t in ports]) >= 2

        await until("both tenants' schedules fired twice", both_fired_twice, 15)
        views = {t: await store.get("tick", t) for t in ports}
        for t, v in views.items():
            assert v is not None and not v.paused and v.fired >= 2, (t, v)

        procs["tenant-a"].stop()  # tenant-a's last word lasts a TTL, then its schedules are held

        async def a_held() -> bool:
            view = await store.get("tick", "tenant-a")
            return view is not None and view.paused

        async def b_fired_twice_more() -> bool:
            return await fired("tenant-b") >= views["tenant-b"].fired + 2  # type: ignore[union-attr]

        await until("tenant-a's schedule held", a_held, ttl_ms / 1000 + 1.5)
        await until("tenant-b's schedule fired twice more", b_fired_twice_more, 10)
        a, b = await store.get("tick", "tenant-a"), await store.get("tick", "tenant-b")
        assert a is not None and a.paused and a.paused_reason is not None, a
        assert a.paused_reason.startswith("token: ") and "tenant-a" in a.paused_reason
        assert b is not None and not b.paused and b.fired >= views["tenant-b"].fired + 2, b  # type: ignore[union-attr]
        fired_a = a.fired
        await asyncio.sleep(1.2)
        again = await store.get("tick", "tenant-a")
        assert again is not None and again.fired == fired_a and again.paused
    finally:
        for proc in procs.values():
            proc.stop(timeout=20)


async def test_a_look_that_finds_nothing_due_is_one_call(redis: Redis, redis_url: str) -> None:
    """A firer's look with nothing due claims and stops there: the live tenants (read for the holds
    of what it claimed) are not read; an idle worker looks five times a second."""
    firer = Firer(producer_for(redis, redis_url))
    await firer.fire_due()  # the library loaded, the connection made
    await redis.config_resetstat()
    assert await firer.fire_due() == 0
    stats = await redis.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
    assert "zrange" not in calls, calls
    assert calls.get("fcall", 0) + calls.get("evalsha", 0) == 1, calls
