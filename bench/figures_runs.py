"""Figures 1–3 and 4b: throughput, steps, Redis cost per step, heartbeat cost."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import time
from typing import Any

from redis.asyncio import Redis

from bench.figure import Figure
from bench.plumbing import EFFECTS, PURE, Plumbing
from shared.settings import Settings
from tests.support.schema import K

# What the beat script runs (shared/lua/beat.lua), besides the clock's TIME: its lease key checked
# and renewed, its entry in the workers index, the live workers counted, its abort inbox read.
BEAT_COMMANDS = ("exists", "set", "zadd", "zcount", "lpop")


class RunFigures(Plumbing):
    async def fig_throughput(self, r: Redis) -> None:
        a = self.args
        f = Figure(
            "1. one-step runs/s, one worker process",
            "runs/s",
            base_name="bare arq no-op job",
            target="≥ 0.5 × bare arq",
        )
        kept: list[float] = []
        for _ in range(a.reps):
            await self.flush(r)
            await self.raw_enqueue(r, a.runs)
            box: list[subprocess.Popen[bytes]] = []
            t = await self.drain_time(
                r,
                a.runs,
                lambda box=box: box.append(self.spawn(["-m", "arq", "bench.bare_arq.WorkerSettings"])),  # type: ignore[misc]
                lambda: self.arq_done(r),
            )
            f.base.append(a.runs / t)
            self.stop(box[0])
            await self.flush(r)
            mem0 = (await r.info("memory"))["used_memory"]
            await self.producer(r).submit_many([self.script_run([{"text": "hi"}])] * a.runs)
            t = await self.drain_time(
                r,
                a.runs,
                lambda box=box: box.append(self.spawn(["-m", "app.worker"])),  # type: ignore[misc]
                lambda: self.runs_done(r),
            )
            f.ours.append(a.runs / t)
            self.stop(box[1])
            # The finished runs, kept until AGENTMILL_RETENTION_S (arq's result keys, gone after 60 s, included).
            kept.append(((await r.info("memory"))["used_memory"] - mem0) / a.runs / 1e3)
        f.extra = {"redis_kb_per_finished_run": statistics.median(kept)}
        f.note = f"Redis memory a finished one-step run (used_memory growth ÷ runs): {f.extra['redis_kb_per_finished_run']:.1f} KB"
        self.figures.append(f)

    async def fig_steps(self, r: Redis, per_step_rtt: int, per_step_cmds: int) -> None:
        a = self.args
        f = Figure(
            "2. steps/s of ten-step runs (one tool call a step)",
            "steps/s",
            base_name=f"raw agent step ({per_step_cmds} cmds in {per_step_rtt} round trips)",
            target="≥ 0.5 × raw step",
        )
        n = a.step_runs
        script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * 10 + [{"text": "done"}]
        for _ in range(a.reps):
            await self.flush(r)
            await self.producer(r).submit_many([self.script_run(script)] * n)
            box: list[subprocess.Popen[bytes]] = []
            t = await self.drain_time(
                r,
                n,
                lambda box=box: box.append(self.spawn(["-m", "app.worker"])),  # type: ignore[misc]
                lambda: self.runs_done(r),
            )
            f.ours.append(n * 10 / t)
            self.stop(box[0])
            f.base.append(await self.raw_steps(r, n, per_step_rtt, per_step_cmds))
        self.figures.append(f)

    async def raw_steps(self, r: Redis, runs: int, rtt: int, cmds: int) -> float:
        """The same Redis work as our steps, without arq or the agent: many tasks, pipelined."""
        await self.flush(r)
        per_rt = max(1, cmds // max(1, rtt))
        payload = b'{"kind":"tool_result","content":"x"}'

        async def one_run(i: int) -> None:
            stream, h = f"raw:{{{i}}}:events", f"raw:{{{i}}}:run"
            for s in range(10):
                for _ in range(rtt):
                    async with r.pipeline(transaction=False) as pipe:
                        for k in range(per_rt):
                            if k % 3 == 0:
                                pipe.xadd(stream, {"seq": s, "payload": payload})
                            elif k % 3 == 1:
                                pipe.hset(h, "ckpt", payload)  # type: ignore[arg-type]
                            else:
                                pipe.zadd("raw:live", {str(i): s})
                        await pipe.execute()

        t0 = time.perf_counter()
        await asyncio.gather(*(one_run(i) for i in range(runs)))
        return runs * 10 / (time.perf_counter() - t0)

    async def fig_cost(self, r: Redis) -> tuple[int, int]:
        """Redis commands (server side, INFO commandstats) and round trips (client side) per run and per step."""
        from worker.adapters import redis_store as store_mod
        from worker.process.jobs import WorkerProcess

        # Client round trips: every write to a connection (a command, a pipeline, the route's and
        # the batcher's packed sends all go through it; each send is followed by its replies' reads).
        counts = {"rtt": 0}
        from redis.asyncio.connection import AbstractConnection

        orig_send = AbstractConnection.send_packed_command

        async def counted(self: AbstractConnection, *args: Any, **kw: Any) -> Any:
            counts["rtt"] += 1
            return await orig_send(self, *args, **kw)

        store_rtt = {"n": 0}
        orig_commit = store_mod.RedisRunStore.commit
        orig_acquire = store_mod.RedisRunStore.acquire

        async def c_commit(self: store_mod.RedisRunStore, *args: Any, **kw: Any) -> int:
            store_rtt["n"] += 1
            return await orig_commit(self, *args, **kw)

        async def c_acquire(self: store_mod.RedisRunStore, *args: Any, **kw: Any) -> Any:
            # only an acquire of its own: a run whose job the worker claimed was acquired by the
            # claim's round trip (one for a whole batch of jobs: client round trips, below)
            before = self.round_trips
            try:
                return await orig_acquire(self, *args, **kw)
            finally:
                store_rtt["n"] += self.round_trips - before

        results: dict[tuple[str, int], dict[str, float]] = {}
        by_cmd: dict[tuple[str, int], dict[str, int]] = {}
        n = self.args.cost_runs
        profiles = self.pure_profiles()
        for agent, steps in (("scripted", 0), (EFFECTS, 10), (PURE, 10)):
            await self.flush(r)
            script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * steps + [
                {"text": "done"}
            ]
            await self.producer(r, profiles=profiles).submit_many([self.script_run(script, agent)] * n)
            await r.config_resetstat()
            counts["rtt"] = 0
            store_rtt["n"] = 0
            AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
            store_mod.RedisRunStore.commit = c_commit  # type: ignore[method-assign]
            store_mod.RedisRunStore.acquire = c_acquire  # type: ignore[method-assign]
            try:
                wp = WorkerProcess(
                    Settings(
                        redis_url=self.server.url,
                        poll_delay_s=self.args.poll_delay,
                        heartbeat_ms=60_000,
                        lease_ms=600_000,  # a beat fits three times (the settings' rule)
                        reconcile_ms=60_000,
                        worker_metrics_port=-1,
                        profiles=profiles,
                    )
                )
                task = asyncio.create_task(wp.run())
                probe = Redis.from_url(self.server.url)
                try:
                    while not (
                        await probe.zcard(K.live) == 0
                        and await probe.zcard(K.queue) == 0
                        and not wp.deps.active
                    ):
                        await asyncio.sleep(0.01)
                finally:
                    await probe.aclose()
                client_rtt = counts["rtt"]
                wp.request_stop()
                await task
            finally:
                AbstractConnection.send_packed_command = orig_send  # type: ignore[method-assign]
                store_mod.RedisRunStore.commit = orig_commit  # type: ignore[method-assign]
                store_mod.RedisRunStore.acquire = orig_acquire  # type: ignore[method-assign]
            stats = await r.info("commandstats")
            counted_cmds = {
                k.removeprefix("cmdstat_"): v["calls"]
                for k, v in stats.items()
                if not k.startswith(
                    (
                        "cmdstat_info",
                        "cmdstat_config",
                        "cmdstat_zcard",
                        "cmdstat_evalsha",
                        "cmdstat_script",
                        "cmdstat_fcall",
                        "cmdstat_function",
                    )
                )
            }
            by_cmd[agent, steps] = counted_cmds
            server_cmds = sum(counted_cmds.values())
            results[agent, steps] = {
                "client_rtt": client_rtt / n,
                "store_rtt": store_rtt["n"] / n,
                "server_cmds": server_cmds / n,
            }
        fixed, ten = results["scripted", 0], results[EFFECTS, 10]
        per_step = {k: (ten[k] - fixed[k]) / 10 for k in fixed}
        declared = {k: (results[PURE, 10][k] - fixed[k]) / 10 for k in fixed}
        for label, key in (
            ("agentmill round trips (acquire + commits)", "store_rtt"),
            ("all client round trips incl. arq", "client_rtt"),
            ("Redis commands run by the server", "server_cmds"),
        ):
            f = Figure(
                f"3. {label}: per step / per run fixed",
                "count",
                target="≤ 2 round trips per step" if key == "store_rtt" else "",
            )
            f.ours = [per_step[key]]
            f.note = (
                f"fixed per run: {fixed[key]:.1f}; 10-step run: {ten[key]:.1f}; a step with the tool declared "
                f"sideEffects: false: {declared[key]:.1f}"
            )
            if key == "server_cmds":  # where they go: each command's calls per step
                for agent in (EFFECTS, PURE):
                    ten_cmds, none = by_cmd[agent, 10], by_cmd["scripted", 0]
                    step_cmds = {c: (ten_cmds.get(c, 0) - none.get(c, 0)) / (10 * n) for c in ten_cmds}
                    f.note += f"; per step ({agent}): " + ", ".join(
                        f"{c} {v:.1f}"
                        for c, v in sorted(step_cmds.items(), key=lambda kv: -kv[1])
                        if v >= 0.05
                    )
            self.figures.append(f)
        return max(1, round(per_step["store_rtt"])), max(1, round(per_step["server_cmds"]))

    async def fig_heartbeat(self, r: Redis) -> None:
        """Figure 4b: the Redis work of a worker whose runs all wait on their model, by runs in flight.
        Liveness is one lease per worker, so it must not grow with the runs (it used to be a renewal
        script per run per beat: about 8 commands per run per second)."""
        base = 0.0
        for n in self.args.beat_inflight:
            await self.flush(r)
            await self.producer(r).submit_many([self.script_run([{"text": "ok", "delayMs": 30_000}])] * n)
            w = self.spawn(["-m", "app.worker"], AGENTMILL_MAX_JOBS=str(n + 10))
            deadline = time.monotonic() + 120
            while True:  # every run acquired: in its worker's runs set
                ids = await r.zrange(K.workers, 0, -1)
                held = await r.scard(K.worker_runs(ids[0].decode())) if ids else 0  # type: ignore[misc]
                if held >= n:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {held} of {n} runs started")
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # past the start-up commits
            await r.config_resetstat()
            t0 = time.perf_counter()
            await asyncio.sleep(self.args.beat_seconds)
            stats = await r.info("commandstats")
            span = time.perf_counter() - t0
            self.stop(w)
            calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
            calls.pop("config", None)
            calls.pop("info", None)
            per_s = sum(calls.values()) / span
            beats = calls.get("lpop", 0)  # only the heartbeat script pops (the worker's inbox)
            beat_cmds = sum(calls.get(c, 0) for c in BEAT_COMMANDS) + beats  # + its EVALSHA
            base = base or per_s
            f = Figure(
                f"4b. Redis commands/s of one worker, {n} runs waiting on the model",
                "cmds/s",
                base_name=f"the same with {self.args.beat_inflight[0]} runs",
                target="flat: does not grow with runs in flight",
                higher_is_better=False,
            )
            f.ours, f.base = [per_s], [base]
            f.note = (
                f"{beats / span:.1f} beats/s, {beat_cmds / max(1, beats):.0f} commands per beat "
                f"(EVALSHA, {', '.join(c.upper() for c in BEAT_COMMANDS)}); the rest is arq's poll loop "
                f"and the reconciler sweep"
            )
            self.figures.append(f)
