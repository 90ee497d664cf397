"""Figure 14: the economy lane against the standard lane on the same workload. ``--economy-runs``
runs (200) of 3 model calls and 2 tool calls each, on 2 worker processes, first all on the standard
lane, then all on the economy lane; the model is the local batch server (tests/support/
batch_server.py: its chat completions for the standard lane, its Batch API after
``--economy-delay`` seconds (1 s) for the economy lane), its batcher closing a batch at 100
requests or 0.5 s and polling every 0.25-1 s.

14a. Cost per run (the profile's prices; the economy lane's calls at the batch price).
14b. Completion time, submission to the run's last event (p50 / p90).
14c. Redis commands per model call (INFO commandstats over the whole pool while the lane's runs
ran: submissions, runs, tool calls, the batchers' writes and polls).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

from bench.figure import Figure
from bench.plumbing import Plumbing, run_ids
from bench.probes import pct
from shared.profiles import load_profiles
from tests.integration.helpers import producer_for, stream, wait_all
from tests.support.batch_server import BatchServer, tool_rounds_backend

CALLS = 3  # model calls a run
PRICES = {"inputPerMTok": 0.15, "outputPerMTok": 0.6}  # gpt-4o-mini's
BATCHER_ENV = {
    "AGENTMILL_ECONOMY_BATCH_REQUESTS": "100",
    "AGENTMILL_ECONOMY_BATCH_AGE_S": "0.5",
    "AGENTMILL_ECONOMY_POLL_MIN_S": "0.25",
    "AGENTMILL_ECONOMY_POLL_MAX_S": "1",
}


def profiles_file(directory: Path, base_url: str) -> Path:
    path = directory / "economy-profiles.json"
    provider = {"kind": "openai", "baseUrl": base_url, "model": "gpt-4o-mini", "pricing": PRICES}
    profile = {"name": "eco", "provider": provider, "tools": ["echo"], "economy": {"enabled": True}}
    path.write_bytes(orjson.dumps({"profiles": [profile]}))
    return path


async def commands(r: Redis) -> int:
    info = await r.info("commandstats")
    return sum(int(v["calls"]) for v in info.values())


async def lane_figures(r: Redis, p: Any, lane: str, n: int) -> dict[str, Any]:
    """n runs of the lane, submitted at once: cost per run, p50/p90 completion, Redis commands."""
    await r.config_resetstat()
    t0 = time.monotonic()
    runs = [
        {"agent": "eco", "lane": lane, "inputMessages": [{"role": "user", "content": f"t{i}"}]}
        for i in range(n)
    ]
    ids = run_ids(await p.submit_many(runs))
    recs = await wait_all(p, ids, 900)
    calls = await commands(r)
    lat = sorted([((await stream(r, rid))[-1].ts - rec.created_at_ms) / 1000 for rid, rec in recs.items()])
    costs = [
        (rec.result.usage.cost_usd if rec.result and rec.result.usage else None) or 0.0
        for rec in recs.values()
    ]
    return {
        "runs": n,
        "statuses": sorted({rec.status.value for rec in recs.values()}),
        "cost_per_run_usd": sum(costs) / n,
        "p50_s": lat[len(lat) // 2],
        "p90_s": pct(lat, 90),
        "redis_commands_per_model_call": calls / (CALLS * n),
        "wall_s": time.monotonic() - t0,
    }


async def compare(r: Redis, url: str, directory: Path, n: int, delay_s: float, spawn: Any) -> dict[str, Any]:
    """Both lanes' figures; ``spawn(env)`` starts a worker process, returning a stop function."""
    backend = tool_rounds_backend("echo", rounds=CALLS - 1, arguments={"text": "x"})
    async with BatchServer(backend, delay_s=delay_s) as server:
        path = profiles_file(directory, server.base_url)
        stops = [spawn({"AGENTMILL_PROFILES": str(path), **BATCHER_ENV}) for _ in range(2)]
        try:
            p = producer_for(r, url)
            p.profiles = load_profiles(str(path))
            out = {lane: await lane_figures(r, p, lane, n) for lane in ("standard", "economy")}
        finally:
            for stop in stops:
                stop()
        assert sum(server.received.values()) == len(server.received) == CALLS * n, "a request sent twice"
    return out


class EconomyFigures(Plumbing):
    async def fig_economy(self, r: Redis) -> None:
        n, delay = self.args.economy_runs, self.args.economy_delay
        await self.flush(r)

        def spawn(env: dict[str, str]) -> Any:
            w = self.spawn(["-m", "app.worker"], **env)
            return lambda: self.stop(w)

        got = await compare(r, self.server.url, Path(tempfile.mkdtemp()), n, delay, spawn)
        std, eco = got["standard"], got["economy"]
        where = (
            f"{n} runs a lane of {CALLS} model calls and {CALLS - 1} tool calls, 2 worker processes; "
            f"the batch server answers a batch {delay:g} s after its creation; statuses standard "
            f"{std['statuses']}, economy {eco['statuses']}"
        )
        cost = Figure("14a. economy lane: cost per run", "USD", base_name="the standard lane",
                      target="0.5× (the batch price)", higher_is_better=False, note=where)  # fmt: skip
        cost.ours, cost.base = [eco["cost_per_run_usd"]], [std["cost_per_run_usd"]]
        lat = Figure(f"14b. economy lane: completion p50 / p90 (batch delay {delay:g} s)", "s",
                     base_name="the standard lane (p50 / p90)", higher_is_better=False,
                     note=f"wall time standard {std['wall_s']:.1f} s, economy {eco['wall_s']:.1f} s")  # fmt: skip
        lat.ours, lat.base = [eco["p50_s"], eco["p90_s"]], [std["p50_s"], std["p90_s"]]
        cmds = Figure("14c. economy lane: Redis commands per model call", "commands",
                      base_name="the standard lane", higher_is_better=False,
                      note="INFO commandstats over the pool while the lane's runs ran, the batchers' polls included")  # fmt: skip
        cmds.ours = [eco["redis_commands_per_model_call"]]
        cmds.base = [std["redis_commands_per_model_call"]]
        self.figures += [cost, lat, cmds]
