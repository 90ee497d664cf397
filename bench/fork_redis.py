"""Figure 9's fork attack on the Redis side, in counts the machine's load does not change: forks of a
run whose transcript is 0.9 MB (the attack's), one at a time, through the API and a worker in this
process, on a redis-server of its own; per script (and per plain command), the calls, the bytes the
calls answered and were sent, and Redis's own time per call (SLOWLOG at 0 µs: the command's time
inside Redis, the other commands' wait behind it; the commands scripts run are logged too).

    bin/dev python -m bench.fork_redis [--forks 10] [--url redis://…]

``--url``: a redis-server started apart, e.g. under valgrind's callgrind
(``--toggle-collect=fcallCommand``) to count the scripts' instructions.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
from typing import Any

import httpx
from redis.asyncio import Redis

from shared import functions
from shared.settings import Settings
from tests.integration.api_support import A, api, settings
from tests.support.redis_server import RedisServer
from worker.process.jobs import WorkerProcess

os.environ["AGENTMILL_DEV_PROFILES"] = "true"  # the scripted profile the forked run follows
MESSAGES, MESSAGE_CHARS = 9, 100_000  # bench/attack_kinds.py's forked run


def size(reply: Any) -> int:
    """The bytes of a reply's strings (nested lists walked)."""
    if isinstance(reply, bytes | str):
        return len(reply)
    if isinstance(reply, list | tuple):
        return sum(size(x) for x in reply)
    return 0


answered: collections.Counter[str] = collections.Counter()
sent: collections.Counter[str] = collections.Counter()
called: collections.Counter[str] = collections.Counter()
_VERSION = re.compile(r"_[0-9a-f]{8,}$")


def counting() -> None:
    """Every script's reply bytes, by script name (FCALL's function, less its version)."""
    original, queued, command = (
        functions.FunctionScript.__call__,
        functions.FunctionScript.queue,
        functions.FunctionScript.command,
    )

    async def call(self: Any, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        got = await original(self, keys, args, client)  # its command() counts what it sent
        name = _VERSION.sub("", str(self.name))
        answered[name] += size(got)
        called[name] += 1
        return got

    def queue(self: Any, pipe: Any, keys: Any, args: Any) -> None:
        sent[_VERSION.sub("", str(self.name))] += size(list(args))
        queued(self, pipe, keys, args)

    def framed(self: Any, keys: Any, args: Any) -> tuple[Any, ...]:  # a batch's (worker/adapters/batcher.py)
        sent[_VERSION.sub("", str(self.name))] += size(list(args))
        return command(self, keys, args)

    functions.FunctionScript.command = framed  # type: ignore[method-assign]
    functions.FunctionScript.__call__ = call  # type: ignore[method-assign]
    functions.FunctionScript.queue = queue  # type: ignore[method-assign]


async def ended(c: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    while True:
        view: dict[str, Any] = (
            await c.get(f"/v1/runs/{run_id}/wait", params={"timeout": 5}, headers=A)
        ).json()
        if view["status"] in ("completed", "failed", "aborted"):
            return view


async def main(forks: int, given: str, small: int = 0) -> None:
    counting()
    server = RedisServer()
    if not given:
        server.start()
    url = given or server.url
    r = Redis.from_url(url)
    worker = WorkerProcess(Settings(redis_url=url, poll_delay_s=0.02, worker_metrics_port=-1))
    working = asyncio.create_task(worker.run())
    try:
        async with api(settings(url)) as base, httpx.AsyncClient(base_url=base, timeout=60) as c:
            while (await c.get("/readyz")).status_code != 200:
                await asyncio.sleep(0.05)
            big = [{"role": "user", "content": f"{i % 10}" * MESSAGE_CHARS} for i in range(MESSAGES)]
            run = {"agent": "scripted", "inputMessages": big, "runtimeHints": {"script": [{"text": "done"}]}}
            view: dict[str, Any] = {}
            if forks:
                made = await c.post("/v1/runs", json=run, headers=A)
                view = await ended(c, made.json()["runId"])
            await r.config_set("slowlog-log-slower-than", 0)
            await r.config_set("slowlog-max-len", 100_000)
            await r.slowlog_reset()
            answered.clear()
            called.clear()
            sent.clear()
            for _ in range(small):  # small runs, one at a time (figure 1's kind): their commands a run
                got = await c.post("/v1/runs", json={**run, "inputMessages": [{"role": "user", "content": "hi"}]},
                                   headers=A)  # fmt: skip
                assert (await ended(c, got.json()["runId"]))["status"] == "completed"
            for _ in range(forks):
                got = await c.post(
                    f"/v1/runs/{view['runId']}/fork", json={"atSeq": view["lastSeq"]}, headers=A
                )
                assert got.status_code == 202, got.text
                assert (await ended(c, got.json()["runId"]))["status"] == "completed"
            log = await r.slowlog_get(100_000)
    finally:
        working.cancel()
        await asyncio.gather(working, return_exceptions=True)
        await r.aclose()
        if not given:
            server.close()
    us: dict[str, list[int]] = collections.defaultdict(list)
    for e in log:
        cmd = (
            [x.decode(errors="replace") if isinstance(x, bytes) else str(x) for x in e["command"].split()[:2]]
            if isinstance(e["command"], bytes)
            else []
        )
        name = cmd[0].upper() if cmd else "?"
        if name == "FCALL" and len(cmd) > 1:
            name = _VERSION.sub("", cmd[1])
        us[name].append(int(e["duration"]))
    print(
        f"{forks} forks of a run with a {MESSAGES * MESSAGE_CHARS / 1e6:.1f} MB transcript, {small} small runs"
    )
    print(f"commands Redis ran (scripts' own included): {len(log)}")
    print(
        f"{'command':<22}{'calls':>7}{'µs mean':>9}{'µs max':>8}{'µs total':>10}{'answered kB/call':>18}{'sent kB':>9}"
    )
    for name, xs in sorted(us.items(), key=lambda kv: -sum(kv[1]))[:16]:
        kb = answered[name] / max(called[name], 1) / 1000 if name in called else float("nan")
        out = sent[name] / len(xs) / 1000 if name in sent else float("nan")
        print(
            f"{name:<22}{len(xs):>7}{sum(xs) / len(xs):>9.0f}{max(xs):>8}{sum(xs):>10}{kb:>18.1f}{out:>9.1f}"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--forks", type=int, default=10)
    ap.add_argument("--url", default="", help="a redis-server already running (e.g. under callgrind)")
    ap.add_argument("--small", type=int, default=0, help="small runs first (one step each), as figure 1's")
    a = ap.parse_args()
    asyncio.run(main(a.forks, a.url, a.small))
