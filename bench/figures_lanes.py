"""Figure 11: priority lanes. One worker process (max_jobs 50) and runs of one model reply that
takes ``--lanes-run-ms`` on average (half to one and a half times it).

11a. Interactive runs passing a batch (the default aging quantum, 30 s): the worker busy with a 20,000-run priority-2 batch; 200
priority-8 runs submitted one every 40 ms; each one's submit → first event (its ``status running``,
as the worker stamped it) beside the same 200 runs sent to the idle worker. The batch's
completions per second in the window before them and in the window while they are submitted.

11b. Aging: a priority-2 batch submitted while a steady priority-8 stream (more than the worker
can take) arrives. The rule: a run of priority p is never overtaken by a run of priority q
submitted more than (q - p) × AGENTMILL_PRIORITY_AGING_MS after it; the figure is when the oldest
batch run started, and how many stream runs broke the rule (submitted more than 6 quanta after it,
started before it).

11c. Priority at a provider's limiter: calls of a provider limited to 2 concurrent calls, each
holding its slot ``LIMITER_CALL_MS``; 200 priority-2 calls waiting in a loop, then priority-8 calls
one at a time: each one's wait for its slot, beside the same calls to the idle limiter (the bound:
the idle p99 plus one call's duration), and beside the same load served by arrival (the limiter as
it was: no line), whose waits are capped at ``LIMITER_BASE_CAP_S``.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from typing import Any

from redis.asyncio import Redis

from bench.figure import Figure
from bench.plumbing import Plumbing
from bench.probes import pct
from shared.provider_config import ProviderConfig
from shared.quotas import DEFAULT_TENANT
from shared.scripts import Scripts
from tests.support.schema import K
from worker.adapters.limiter import ProviderLimiter

BATCH = "lanes-batch"
LIMITER_CALL_MS = 100
LIMITER_BASE_CAP_S = 30.0
SPACING_S = 0.04  # between two interactive runs


class LanesFigures(Plumbing):
    rng = random.Random(28)

    def lane_run(self, priority: int, **extra: Any) -> dict[str, Any]:
        # Durations spread from half to one and a half times run_ms: runs of one fixed length started
        # together end together, and a full worker would free its slots in waves.
        ms = int(self.args.lanes_run_ms * (0.5 + self.rng.random()))
        run = self.script_run([{"text": "lane", "delayMs": ms}])
        return {**run, "priority": priority, **extra}

    async def first_events(self, r: Redis, ids: list[str]) -> list[int]:
        """Each run's first event time (ms; 0: none yet)."""
        async with r.pipeline(transaction=False) as pipe:
            for rid in ids:
                pipe.xrange(K.events(rid), count=1)
            replies = await pipe.execute()
        return [int(e[0][1][b"ts"]) if e else 0 for e in replies]

    async def batch_done(self, r: Redis) -> int:
        return int(await r.hget(K.batch(DEFAULT_TENANT, BATCH), "completed") or 0)  # type: ignore[misc]

    async def interactive(self, r: Redis, p: Any, n: int) -> tuple[list[float], list[int]]:
        """n priority-8 runs, one every SPACING_S: submit → first event (ms), once all started, and
        the first events' times."""
        sent: list[tuple[str, float]] = []
        for _ in range(n):
            t = time.time() * 1000
            sent.append(((await p.submit(self.lane_run(8))).run_id, t))
            await asyncio.sleep(SPACING_S)
        deadline = time.monotonic() + 60
        while True:
            firsts = await self.first_events(r, [rid for rid, _ in sent])
            if all(firsts) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        return [f - t for (_, t), f in zip(sent, firsts, strict=True) if f], firsts

    async def fig_lanes(self, r: Redis) -> None:
        n_hi = self.args.lanes_interactive
        env = {"AGENTMILL_MAX_JOBS": "50"}  # and the default aging quantum (30 s)
        # 11a, idle: the same interactive runs to an idle worker.
        await self.flush(r)
        p = self.producer(r)
        w = self.spawn(["-m", "app.worker"], **env)
        await self.wait_started(r)
        await asyncio.sleep(0.3)
        idle, _ = await self.interactive(r, p, n_hi)
        self.stop(w)
        # 11a, busy: the batch first, then the window before and the window with the interactive runs.
        await self.flush(r)
        t0 = time.monotonic()
        batch = [self.lane_run(2) for _ in range(self.args.lanes_batch)]
        for i in range(0, len(batch), 1000):
            await p.submit_many(batch[i : i + 1000], batch_id=BATCH, offset=i, more=True)
        submit_s = time.monotonic() - t0
        w = self.spawn(["-m", "app.worker"], **env)
        await self.wait_started(r)
        await asyncio.sleep(3.0)  # warm: every slot taken
        window = n_hi * SPACING_S
        b0, t_0 = await self.batch_done(r), time.monotonic()
        await asyncio.sleep(window)
        b1, t_1, w_1 = await self.batch_done(r), time.monotonic(), time.time() * 1000
        busy, firsts = await self.interactive(r, p, n_hi)
        b2, t_2, w_2 = await self.batch_done(r), time.monotonic(), time.time() * 1000
        before, during = (b1 - b0) / (t_1 - t_0), (b2 - b1) / (t_2 - t_1)
        hi_in = sum(1 for x in firsts if w_1 <= x <= w_2)  # interactive runs started in the window
        share = hi_in / (hi_in + (b2 - b1))
        drop = 1 - during / before if before else float("nan")
        self.stop(w)
        f = Figure(
            f"11a. priority-8 run submit → first event, worker busy with a {self.args.lanes_batch:,}-run "
            "priority-2 batch (p50 / p99)",
            "ms",
            base_name="the same runs, idle worker (p50 / p99)",
            target="p99 ≈ idle's; batch drop < their share",
            higher_is_better=False,
        )
        f.ours, f.base = [statistics.median(busy), pct(busy, 99)], [statistics.median(idle), pct(idle, 99)]
        f.note = (
            f"{len(busy)}/{n_hi} started; busy p50 {statistics.median(busy):.0f} ms p99 {pct(busy, 99):.0f} ms, "
            f"idle p50 {statistics.median(idle):.0f} ms p99 {pct(idle, 99):.0f} ms; batch {before:.0f} runs/s "
            f"before, {during:.0f} runs/s during: drop {drop:.1%} against their share {share:.1%} of the runs "
            f"started meanwhile; the batch was submitted in {submit_s:.1f} s"
        )
        self.figures.append(f)
        await self.fig_aging(r, {**env, "AGENTMILL_PRIORITY_AGING_MS": str(self.args.lanes_aging_ms)})
        await self.fig_limiter(r)

    async def fig_aging(self, r: Redis, env: dict[str, str]) -> None:
        aging = self.args.lanes_aging_ms  # short, so the bound shows within the bench's time
        await self.flush(r)
        p = self.producer(r, priority_aging_ms=aging)
        w = self.spawn(["-m", "app.worker"], **env)
        await self.wait_started(r)
        rate, seconds = self.args.lanes_stream_rate, self.args.lanes_stream_s
        stream: list[str] = []

        async def steady() -> None:
            tick = 0.1
            for _ in range(int(seconds / tick)):
                subs = await p.submit_many([self.lane_run(8) for _ in range(int(rate * tick))])
                stream.extend(s.run_id for s in subs)  # type: ignore[union-attr]
                await asyncio.sleep(tick)

        feeder = asyncio.create_task(steady())
        await asyncio.sleep(1.0)  # the stream alone first: the worker full of priority-8 runs
        batch = [s.run_id for s in await p.submit_many([self.lane_run(2) for _ in range(200)])]  # type: ignore[union-attr]
        await feeder
        deadline = time.monotonic() + 120
        while not (await self.first_events(r, batch[:1]))[0] and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.stop(w)
        oldest = batch[0]
        looked = [*stream, oldest]
        async with r.pipeline(transaction=False) as pipe:
            for x in looked:
                pipe.hget(K.run(x), "createdAt")
            created = {x: int(c or 0) for x, c in zip(looked, await pipe.execute(), strict=True)}
        started = dict(zip(looked, await self.first_events(r, looked), strict=True))
        bound = (8 - 2) * aging
        waited = started[oldest] - created[oldest]
        ahead_ok = sum(1 for x in stream if created[x] <= created[oldest] + bound)
        broke = sum(
            1
            for x in stream
            if created[x] > created[oldest] + bound + 50 and 0 < started[x] < started[oldest]
        )
        f = Figure(
            f"11b. oldest priority-2 run's wait under a steady priority-8 stream of {rate}/s (aging "
            f"{aging} ms: bound {bound / 1000:.0f} s of later submissions)",
            "s",
            target="rule broken by 0 runs",
            higher_is_better=False,
        )
        f.ours = [waited / 1000]
        f.note = (
            f"started {waited / 1000:.1f} s after its submission; {ahead_ok} stream runs were submitted within "
            f"the bound after it (may go first); stream runs submitted past the bound that started "
            f"before it: {broke}; without aging it would wait for the whole stream ({seconds:.0f} s)"
        )
        self.figures.append(f)

    async def limiter_waits(
        self, r: Redis, lined: bool, n: int, cap_s: float
    ) -> tuple[list[float], list[float]]:
        """(idle waits, waits behind 200 priority-2 calls) of n priority-8 calls, in ms; ``lined``:
        the calls stand in the endpoint's line (else served as they poll, the limiter before it)."""
        await self.flush(r)
        lim = ProviderLimiter(Scripts(r))
        c = ProviderConfig.model_validate({"kind": "openai", "baseUrl": "http://bench.invalid/v1", "model": "m",
                                           "maxConcurrent": 2})  # fmt: skip

        def prio(p: int) -> int | None:
            return p if lined else None

        idle: list[float] = []
        for _ in range(100):
            t0 = time.monotonic()
            held = await lim.hold(c, 0, priority=prio(8))
            idle.append((time.monotonic() - t0) * 1000)
            await held.release(None)

        async def low() -> None:
            while True:
                held = await lim.hold(c, 0, priority=prio(2))
                await asyncio.sleep(LIMITER_CALL_MS / 1000)
                await held.release(None)

        lows = [asyncio.create_task(low()) for _ in range(200)]
        await asyncio.sleep(1.0)
        busy: list[float] = []
        try:
            for _ in range(n):
                t0 = time.monotonic()
                try:
                    held = await asyncio.wait_for(lim.hold(c, 0, priority=prio(8)), cap_s)
                except TimeoutError:
                    busy.append(cap_s * 1000)
                    continue
                busy.append((time.monotonic() - t0) * 1000)
                await asyncio.sleep(LIMITER_CALL_MS / 1000)
                await held.release(None)
                await asyncio.sleep(0.05)
        finally:
            for t in lows:
                t.cancel()
            await asyncio.gather(*lows, return_exceptions=True)
        return idle, busy

    async def fig_limiter(self, r: Redis) -> None:
        idle, busy = await self.limiter_waits(r, True, 20, LIMITER_BASE_CAP_S)
        _, arrival = await self.limiter_waits(r, False, 3, LIMITER_BASE_CAP_S)
        bound = pct(idle, 99) + LIMITER_CALL_MS
        f = Figure(
            "11c. a priority-8 call's wait for a provider limited to 2 concurrent calls, 200 priority-2 calls "
            f"of {LIMITER_CALL_MS} ms waiting (p50 / p99)",
            "ms",
            base_name=f"the same by arrival (the limiter without its line; capped at {LIMITER_BASE_CAP_S:.0f} s)",
            target="p99 ≤ idle p99 + one call",
            higher_is_better=False,
        )
        f.ours, f.base = [statistics.median(busy), pct(busy, 99)], [statistics.median(arrival), max(arrival)]
        f.note = (
            f"behind 200 waiting: p50 {statistics.median(busy):.0f} ms, p99 {pct(busy, 99):.0f} ms; idle limiter "
            f"p50 {statistics.median(idle):.1f} ms, p99 {pct(idle, 99):.1f} ms: bound {bound:.0f} ms "
            f"{'✓' if pct(busy, 99) <= bound else '✗'}; by arrival: p50 {statistics.median(arrival) / 1000:.1f} s, "
            f"max {max(arrival) / 1000:.1f} s"
        )
        self.figures.append(f)
