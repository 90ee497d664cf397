"""Figure 9's first attack (bench/attack.py: calculator bombs, worst-case listings, bogus methods)
against one side of the pool run in this process, every turn of its event loop timed in CPU
(``time.thread_time`` around each ``Handle._run``), with a thread sampling the loop's stack while a
turn runs past 3 ms: the longest turns, what they ran, and where their time went.

    bin/dev python -m bench.turns_probe api|worker [--seconds 30] [--index 2000]

The other side (the worker, or the API) runs as its own process, as in figure 9; the attacker at
nice 19. The loop here is asyncio's own (not uvloop), so its handles can be timed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import os
import pstats
import subprocess
import sys
import threading
import time
from typing import Any

import httpx

from bench.figures_isolation import ID_SECRET, TOKENS, lowest
from bench.plumbing import api_env, wait_ready
from bench.stack_sampler import sample_main_stack
from tests.support.redis_server import RedisServer, free_port

LONG_S = 0.004  # turns this long (CPU) are kept
SAMPLE_S = 0.001
_SKIP = ("events.py", "base_events.py", "runners.py", "turns_probe.py", "<frozen", "threading.py")


class Turns:
    def __init__(self) -> None:
        self.handle: Any = None
        self.started = 0.0
        self.samples: list[str] = []
        self.long: list[tuple[float, str, list[str]]] = []
        self.count = 0
        self.stop = threading.Event()

    def install(self) -> None:
        original = asyncio.events.Handle._run
        turns = self

        def run(handle: asyncio.events.Handle) -> None:
            t = time.thread_time()
            turns.handle, turns.started, turns.samples = handle, time.monotonic(), []
            try:
                original(handle)
            finally:
                cpu = time.thread_time() - t
                turns.handle = None
                turns.count += 1
                if cpu > LONG_S:
                    turns.long.append((cpu, repr(getattr(handle, "_callback", "?"))[:160], turns.samples))

        asyncio.events.Handle._run = run  # type: ignore[method-assign,assignment]
        sample_main_stack(SAMPLE_S, self._busy, self._keep, self.stop, skip=_SKIP, depth=10)

    def _busy(self) -> bool:
        """A turn is running, for 3 ms or more."""
        return self.handle is not None and time.monotonic() - self.started >= 0.003

    def _keep(self, stack: str) -> None:
        self.samples.append(stack)  # the running turn's list (each turn starts its own)

    def report(self, top: int = 25) -> str:
        lines = [f"{self.count} turns, {len(self.long)} over {LONG_S * 1000:.0f} ms of CPU"]
        for cpu, what, samples in sorted(self.long, reverse=True)[:top]:
            lines.append(f"{cpu * 1000:7.1f} ms  {what}")
            for stack, n in collections.Counter(samples).most_common(3):
                lines.append(f"            {n} x {stack[:300]}")
        stacks: collections.Counter[str] = collections.Counter()
        for _, _, samples in self.long:
            stacks.update(s.split(" < ")[0] + " < " + " < ".join(s.split(" < ")[1:4]) for s in samples)
        lines.append("samples inside long turns, by innermost frames:")
        lines += [f"  {n:5d} x {s[:300]}" for s, n in stacks.most_common(20)]
        return "\n".join(lines)


def redis_report(log: list[dict[str, Any]], seconds: float) -> str:
    """SLOWLOG (every command, those scripts ran too) by command or script: calls, µs mean, max, total."""
    us: dict[str, list[int]] = collections.defaultdict(list)
    for e in log:
        parts = e["command"].split(b" ", 2)
        name = parts[0].decode(errors="replace").upper()
        if name == "FCALL" and len(parts) > 1:
            name = parts[1].decode(errors="replace").rsplit("_", 1)[0]
        us[name].append(int(e["duration"]))
    lines = [f"{'command':<22}{'calls':>8}{'µs mean':>9}{'µs max':>8}{'ms total':>10}{'% of attack':>12}"]
    for name, xs in sorted(us.items(), key=lambda kv: -sum(kv[1]))[:15]:
        share = sum(xs) / 1e4 / seconds
        lines.append(
            f"{name:<22}{len(xs):>8}{sum(xs) / len(xs):>9.0f}{max(xs):>8}{sum(xs) / 1000:>10.0f}{share:>11.1f}%"
        )
    return "\n".join(lines)


async def victim(c: httpx.AsyncClient, until: asyncio.Task[Any]) -> list[float]:
    body = {"inputMessages": [{"role": "user", "content": "6*7"}]}
    out = []
    while not until.done():
        t0 = time.perf_counter()
        await c.post("/v1/runs", json=body, headers={"Authorization": "Bearer tok-b"})
        out.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.05)
    return out


async def main(side: str, seconds: float, index: int) -> None:
    server = RedisServer()
    server.start()
    port = free_port()
    os.environ.update(
        api_env(server.url, port, AGENTMILL_API_TOKENS=TOKENS, AGENTMILL_ID_SECRET=ID_SECRET,
                AGENTMILL_WORKER_METRICS_PORT="-1", AGENTMILL_DEV_PROFILES="true")
    )  # fmt: skip
    from shared.settings import Settings

    settings = Settings()
    other = ["-m", "app.worker"] if side == "api" else ["-m", "app.cli", "api"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *other, env=dict(os.environ), stdout=subprocess.DEVNULL
    )
    turns = Turns()
    try:
        if side == "api":
            from app.api import create_app
            from producer.api.serve import api_server

            srv = api_server(create_app(settings), settings, host="127.0.0.1", port=port, log_level="error")
            task = asyncio.create_task(srv.serve())
        else:
            from worker.process.jobs import WorkerProcess

            task = asyncio.create_task(WorkerProcess(settings).run())
        url = f"http://127.0.0.1:{port}"
        await wait_ready(url)
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            a = {"Authorization": "Bearer tok-a"}
            for _ in range(index // 500):
                runs = [{"inputMessages": [{"role": "user", "content": "1+1"}]}] * 500
                while (
                    r := await c.post("/v1/runs/batch", json={"runs": runs}, headers=a)
                ).status_code == 429:
                    await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
            await asyncio.sleep(max(5.0, index / 400))  # the index's runs end
            turns.install()
            from redis.asyncio import Redis

            r = Redis.from_url(server.url)
            await r.config_set("slowlog-log-slower-than", 0)
            await r.config_set("slowlog-max-len", 1_000_000)
            await r.slowlog_reset()
            await r.config_resetstat()
            attack = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.attack", url, "tok-a", str(seconds),
                stdout=asyncio.subprocess.PIPE, preexec_fn=lowest,
            )  # fmt: skip
            over = asyncio.create_task(attack.communicate())
            prof = cProfile.Profile() if os.environ.get("TURNS_PROFILE") else None
            cpu0 = time.thread_time()
            if prof is not None:
                prof.enable()
            got = await victim(c, over)
            if prof is not None:
                prof.disable()
                pstats.Stats(prof).sort_stats("cumulative").print_stats(60)
            print(f"the loop's thread: {time.thread_time() - cpu0:.1f} s of CPU in {seconds:g} s")
            print("attacker:", (await over)[0].decode().strip())
            got.sort()
            print(
                f"B's submits: n={len(got)} p50 {got[len(got) // 2]:.0f} ms p99 {got[int(len(got) * 0.99)]:.0f} ms"
            )
            log = await r.slowlog_get(1_000_000)
            cpu = await r.info("cpu")
            await r.aclose()
            print(f"redis CPU: {cpu['used_cpu_sys'] + cpu['used_cpu_user']:.1f} s (since its start)")
            print(redis_report(log, seconds))
        turns.stop.set()
        print(turns.report())
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        proc.terminate()
        await proc.wait()
        server.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("side", choices=("api", "worker"))
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--index", type=int, default=2000)
    a = ap.parse_args()
    asyncio.run(main(a.side, a.seconds, a.index))
