"""Figure 8: the same load on a Redis Cluster of one and of three masters, side by side: steps/s,
Redis CPU and commands per step, each master's share; and the scale-out estimate built on them."""

from __future__ import annotations

import asyncio
import math
import statistics
import time

from redis.asyncio import Redis

from agentmill_client.statuses import TERMINAL
from bench.figure import Figure
from bench.plumbing import EFFECTS, PURE, Plumbing, run_ids
from producer.service import Producer
from shared.partitions import Partitions
from shared.profiles import profiles_from
from shared.settings import Settings
from tests.support.redis_cluster import LocalRedisCluster

TARGET_RUNS = 100_000  # concurrent runs of the estimate
TARGET_STEP_EVERY_S = 5.0  # one agent step per run every this many seconds
REDIS_CORE_BUDGET = 0.5  # a master planned at half a core, the rest for replication, spikes, failover


class ClusterFigures(Plumbing):
    async def fig_cluster(self, r: Redis) -> None:
        a = self.args
        steps_f = Figure(
            "8. steps/s of ten-step runs on a cluster: 3 masters vs 1",
            "steps/s",
            base_name="the same load on a 1-master cluster",
        )
        cpu_f = Figure("8b. Redis CPU per step (all masters): 3 masters vs 1", "µs", base_name="1 master")
        cmds_f = Figure(
            "8c. Redis commands per step (all masters): 3 masters vs 1", "cmds", base_name="1 master"
        )
        share_f = Figure("8d. busiest master's share of the commands, 3 masters", "%", target="≈ 33 %")
        pure_f = Figure(
            "8g. Redis CPU per step, 3 masters: the tool declared sideEffects: false",
            "µs",
            base_name="undeclared (8b)",
            target="≤ 80 µs",
            higher_is_better=False,
        )
        for _ in range(a.reps):
            got = await self._cluster_load(3, a.cluster_runs, a.cluster_workers, agent=PURE)
            pure_f.ours.append(got["cpu_us"])
            for masters in (1, 3):
                got = await self._cluster_load(masters, a.cluster_runs, a.cluster_workers)
                (steps_f.ours if masters == 3 else steps_f.base).append(got["steps_s"])
                (cpu_f.ours if masters == 3 else cpu_f.base).append(got["cpu_us"])
                (cmds_f.ours if masters == 3 else cmds_f.base).append(got["cmds"])
                if masters == 3:
                    share_f.ours.append(got["top_share"])
                    pure_f.base.append(got["cpu_us"])
        pure_f.note = "8b's load, the echo tool declared: a reply and its result in one commit"
        self.figures += [steps_f, cpu_f, cmds_f, share_f, pure_f]
        self.figures.append(self._estimate(cpu_f.med(cpu_f.ours), cmds_f.med(cmds_f.ours)))
        await self._idle_start_latency()

    async def _idle_start_latency(self) -> None:
        """Submit → the run's first event with an idle worker: a 3-master cluster of 16 partitions
        (every worker polls all of them) beside this bench's single Redis of one partition."""
        f = Figure(
            "8f. submit → first event, idle pool: 3-master cluster, 16 partitions (p50 / p99)",
            "ms",
            base_name="single Redis, one partition",
            target="as on one Redis",
            higher_is_better=False,
        )
        with LocalRedisCluster(masters=3, replicas_per_master=0) as cluster:
            s = Settings(redis_url=cluster.url, redis_cluster=True)
            f.ours = await self._start_latency(s, {"AGENTMILL_REDIS_WAIT_REPLICAS": "0"})
        f.base = await self._start_latency(Settings(redis_url=self.server.url), {})
        f.note = f"{self.args.latency_samples} runs each, one at a time"
        self.figures.append(f)

    async def _start_latency(self, s: Settings, env: dict[str, str]) -> list[float]:
        parts: Partitions[Redis] = Partitions.from_settings(s)
        await parts.start()
        w = self.spawn(["-m", "app.worker"], REDIS_URL=s.redis_url,
                       AGENTMILL_REDIS_CLUSTER="true" if s.redis_cluster else "false", **env)  # fmt: skip
        try:
            producer = Producer(parts, settings=s, profiles=profiles_from(None))
            warm = await producer.submit(self.script_run([{"text": "warm"}]))
            await producer.wait(warm.run_id, timeout_s=30)  # the worker is up and polling
            lat: list[float] = []
            for _ in range(self.args.latency_samples):
                t0 = time.perf_counter()
                sub = await producer.submit(self.script_run([{"text": "hi"}]))
                await producer.read_events(sub.run_id, limit=1, block_ms=5000)
                lat.append((time.perf_counter() - t0) * 1000)
                await asyncio.sleep(0.01)
        finally:
            self.stop(w)
            await parts.aclose()
        lat.sort()
        return [statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]]

    async def _cluster_load(
        self, masters: int, runs: int, workers: int, agent: str = EFFECTS
    ) -> dict[str, float]:
        """``runs`` ten-step runs (one echo tool call a step) through ``workers`` worker processes on
        a fresh cluster of ``masters`` masters (no replicas: their CPU would share these cores), with
        the profile ``agent`` (``PURE``: its echo declared sideEffects: false)."""
        profiles = self.pure_profiles()
        with LocalRedisCluster(masters=masters, replicas_per_master=0) as cluster:
            s = Settings(redis_url=cluster.url, redis_cluster=True, max_batch=100_000, profiles=profiles)
            parts: Partitions[Redis] = Partitions.from_settings(s)
            await parts.start()
            try:
                producer = Producer(parts, settings=s, profiles=profiles_from(profiles))
                script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * 10 + [
                    {"text": "done"}
                ]
                env = {"REDIS_URL": cluster.url, "AGENTMILL_REDIS_CLUSTER": "true",
                       "AGENTMILL_REDIS_WAIT_REPLICAS": "0", "AGENTMILL_PROFILES": profiles}  # fmt: skip
                procs = [self.spawn(["-m", "app.worker"], **env) for _ in range(workers)]
                try:
                    # Started and polling before the clock starts: interpreter start-up was about 1 s
                    # of a 2 s span. Submission is measured with the runs (its commands count too).
                    warm = await producer.submit_many([self.script_run([{"text": "warm"}])] * workers)
                    await self._until_terminal(producer, run_ids(warm))
                    before = cluster.node_stats()
                    t0 = time.perf_counter()
                    subs = await producer.submit_many([self.script_run(script, agent)] * runs)
                    await self._until_terminal(producer, run_ids(subs))
                    span = time.perf_counter() - t0
                finally:
                    for p in procs:
                        self.stop(p)
                after = cluster.node_stats()
            finally:
                await parts.aclose()
        steps = runs * 10
        cmds = {port: after[port]["commands"] - before[port]["commands"] for port in after}
        cpu = sum(after[port]["cpu_s"] - before[port]["cpu_s"] for port in after)
        return {
            "steps_s": steps / span,
            "cpu_us": cpu / steps * 1e6,
            "cmds": sum(cmds.values()) / steps,
            "top_share": 100.0 * max(cmds.values()) / max(1, sum(cmds.values())),
        }

    @staticmethod
    async def _until_terminal(producer: Producer, ids: list[str], within_s: float = 600.0) -> None:
        """Every run ended. It reads one run at a time, the oldest not seen ended, so its own
        commands stay few (reading 200 runs every 0.2 s was about 2.4 of the ~20 commands per step
        figure 8c counted, on the measured cores)."""
        deadline = time.monotonic() + within_s
        left = list(reversed(ids))
        while left:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(left)} runs did not finish")
            rec = await producer.get(left[-1])
            if rec is not None and rec.status in TERMINAL:
                left.pop()
            else:
                await asyncio.sleep(0.1)

    def _estimate(self, cpu_us: float, cmds: float) -> Figure:
        """Masters, workers and Redis CPU for TARGET_RUNS concurrent runs at a step every
        TARGET_STEP_EVERY_S, from the measured Redis CPU per step (commands and start-up included)
        and figure 4's runs in flight per worker process."""
        steps_s = TARGET_RUNS / TARGET_STEP_EVERY_S
        cores = steps_s * cpu_us / 1e6
        masters = max(1, math.ceil(cores / REDIS_CORE_BUDGET))
        per_worker = 1_000  # figure 4: one process carries 1,000 runs in flight at ~0.8 of ideal
        workers = math.ceil(TARGET_RUNS / per_worker)
        f = Figure(
            f"8e. estimate: {TARGET_RUNS:,} runs, a step each every {TARGET_STEP_EVERY_S:.0f} s", "masters"
        )
        f.ours = [float(masters)]
        f.note = (
            f"{steps_s:,.0f} steps/s × {cpu_us:.0f} µs Redis CPU a step = {cores:.1f} Redis cores "
            f"({steps_s * cmds:,.0f} commands/s) → {masters} masters at {REDIS_CORE_BUDGET:.0%} of a core each "
            f"(+ as many replicas), {workers} worker processes of {per_worker} runs (figure 4), "
            f"AGENTMILL_PARTITIONS ≥ {max(16, 4 * masters)} so each master holds several partitions"
        )
        return f
