"""Figures 3b, 3c and 3d: Redis CPU per step with the scripts as a Redis Functions library (FCALL) beside the
same load by EVALSHA (AGENTMILL_REDIS_FUNCTIONS=on / off), on the bench's one Redis, in one run. Figure
3e: the same FCALL load with its tool declared ``sideEffects: false`` (a reply and its result in one
commit, AGENTMILL_STEP_HOLD_MS) beside it undeclared."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.asyncio import Redis

from agentmill_client.statuses import TERMINAL
from bench.figure import Figure
from bench.plumbing import EFFECTS, PURE, Plumbing, run_ids
from bench.probes import process_cpu_s, redis_cpu_s
from shared.scripts import Scripts
from tests.support.schema import K

STEPS = 10  # a run: ten steps (one echo tool call each), then its answer


class FunctionsFigures(Plumbing):
    async def fig_functions(self, r: Redis) -> None:
        a = self.args
        cpu_f = Figure(
            "3b. Redis CPU per step, one Redis: FCALL vs EVALSHA",
            "µs",
            base_name="the same load by EVALSHA",
            target="≤ 80 µs",
            higher_is_better=False,
        )
        inside_f = Figure(
            "3c. FCALL time a step, and what the commands inside took (commandstats)",
            "µs",
            base_name="the commands run inside the scripts",
            higher_is_better=False,
        )
        hold_f = Figure(
            "3e. Redis CPU per step, FCALL, the tool declared sideEffects: false",
            "µs",
            base_name="the same load, the tool undeclared",
            target="≤ 80 µs",
            higher_is_better=False,
        )
        worker_f = Figure(
            "3f. worker CPU per step, FCALL, the tool declared sideEffects: false",
            "µs",
            base_name="the same load, the tool undeclared",
            higher_is_better=False,
        )
        split: dict[str, float] = {}
        for _ in range(a.reps):
            for mode in ("on", "off", "pure"):
                got = await self._load(r, mode, a.functions_runs, a.functions_workers)
                if mode == "pure":
                    hold_f.ours.append(got["cpu_us"])
                    worker_f.ours.append(got["worker_us"])
                    continue
                (cpu_f.ours if mode == "on" else cpu_f.base).append(got["cpu_us"])
                if mode == "on":
                    hold_f.base.append(got["cpu_us"])
                    worker_f.base.append(got["worker_us"])
                    inside_f.ours.append(got["fcall_us"])
                    inside_f.base.append(got["inside_us"])
                    split = got["split"]
        cpu_f.note = (
            f"{a.functions_runs} runs of {STEPS} steps through {a.functions_workers} worker processes, "
            "submission included; INFO cpu (user + sys) over the load / steps"
        )
        inside_f.note = (
            "a step's FCALL time (usec, wall time inside the calls) beside the commands the calls ran "
            "(their own usec): the rest is Lua and its bridge to Redis, paid per redis.call; last rep's "
            "commands a step (µs): " + ", ".join(f"{k} {v:.1f}" for k, v in split.items())
        )
        hold_f.note = (
            "3b's load; declared, a reply and its tool's result go out in one commit when the tool ends "
            "within AGENTMILL_STEP_HOLD_MS (50 ms): one script call a step instead of two"
        )
        worker_f.note = "3e's loads: the worker processes' user + system CPU over the load / steps"
        self.figures += [cpu_f, inside_f, hold_f, worker_f, await self._setup_cost(r)]

    async def _load(self, r: Redis, mode: str, runs: int, workers: int) -> dict[str, Any]:
        await self.flush(r)
        profiles = self.pure_profiles()
        functions = "on" if mode == "pure" else mode
        producer = self.producer(r, redis_functions=functions, profiles=profiles)
        procs = [self.spawn(["-m", "app.worker"], AGENTMILL_REDIS_FUNCTIONS=functions, AGENTMILL_PROFILES=profiles)
                 for _ in range(workers)]  # fmt: skip
        try:
            warm = await producer.submit_many([self.script_run([{"text": "warm"}])] * workers)
            await self._ended(producer, run_ids(warm))
            before = await _stats(r)
            workers_before = sum(process_cpu_s(p.pid) for p in procs)
            await r.config_resetstat()  # commandstats from here (INFO cpu is the process's, not reset)
            script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * STEPS + [
                {"text": "done"}
            ]
            body = self.script_run(script, agent=PURE if mode == "pure" else EFFECTS)
            subs = await producer.submit_many([body] * runs)
            await self._ended(producer, run_ids(subs))
            after = await _stats(r)
            workers_after = sum(process_cpu_s(p.pid) for p in procs)
            stats = await r.info("commandstats")
        finally:
            for p in procs:
                self.stop(p)
        steps = runs * STEPS
        script_cmds = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval")
        inside = {
            k.removeprefix("cmdstat_"): v["usec"] / steps
            for k, v in stats.items()
            if k not in script_cmds and v["usec"] / steps >= 0.5
        }
        return {
            "cpu_us": (after["cpu_s"] - before["cpu_s"]) / steps * 1e6,
            "worker_us": (workers_after - workers_before) / steps * 1e6,
            "fcall_us": sum(stats[k]["usec"] for k in script_cmds if k in stats) / steps,
            "inside_us": sum(inside.values()),
            "split": dict(sorted(inside.items(), key=lambda kv: -kv[1])),
        }

    async def _setup_cost(self, r: Redis, calls: int = 20_000) -> Figure:
        """3d. What a script call costs before its own work: a commit of a run that does not exist
        returns after its first HMGET (the prelude's setup and that one read), by FCALL and EVALSHA.
        commandstats' usec is wall time inside the call: calls alternate, so load hits both alike."""
        f = Figure(
            "3d. a commit answering 'missing' (setup + one HMGET)",
            "µs/call",
            base_name="EVALSHA (the prelude run per call)",
            higher_is_better=False,
        )
        for _ in range(self.args.reps):
            for functions in (True, False):
                scripts = Scripts(r, functions=functions)
                k, a = scripts.frame(K, [K.run("nope")], [1, 1, "w", "nope", ""])
                command = scripts.commit.command(k, a)
                await scripts.commit(keys=k, args=a)  # loaded
                await r.config_resetstat()
                for i in range(0, calls, 1000):
                    async with r.pipeline(transaction=False) as pipe:
                        for _ in range(min(1000, calls - i)):
                            pipe.execute_command(*command)
                        await pipe.execute()
                stats = await r.info("commandstats")
                name = "cmdstat_fcall" if functions else "cmdstat_evalsha"
                (f.ours if functions else f.base).append(float(stats[name]["usec_per_call"]))
        f.note = f"INFO commandstats usec_per_call over {calls:,} calls"
        return f

    @staticmethod
    async def _ended(producer: Any, ids: list[str]) -> None:
        left = list(reversed(ids))
        deadline = time.monotonic() + 600
        while left:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(left)} runs did not finish")
            rec = await producer.get(left[-1])
            if rec is not None and rec.status in TERMINAL:
                left.pop()
            else:
                await asyncio.sleep(0.1)


async def _stats(r: Redis) -> dict[str, float]:
    return {"cpu_s": await redis_cpu_s(r)}
