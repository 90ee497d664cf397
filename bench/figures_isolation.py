"""Figure 9: one tenant's worst input against another tenant's latency, side by side.

An API and a worker in their own processes, with the dev profiles off (production's profiles) and
the default quotas. Tenant B submits `6*7` to the `default` profile one run at a time and we time
submit (the POST's answer) and first event (its `status running` in the stream, read with XREAD).
Baseline: B alone. Then the same while tenant A, from another process (bench/attack.py), sends
calculator bombs, 32 parallel worst-case listings over an index of its own runs, and 20,000
requests with made-up methods. The figure is B's p99 under attack minus B's p99 alone.

Then, one after another, the attacks of bench/attack_kinds.py (schema, fork, schedule, child, MCP;
--isolation-attacks picks some), each for --isolation-attack-s seconds while B submits as before,
each against the same baseline; between two, the attacker's runs are aborted and its schedules
deleted.

The attacker's own processes (the attack clients and the MCP server it points its profile at) run at
the lowest CPU priority (nice 19), the pool's (API, worker, Redis) at the normal one: on a machine of
two cores a flood client at normal priority takes a core the pool would not lose to a remote attacker.
This stands the attacker's CPU elsewhere; the pool still pays for every request it reads and every
byte the MCP server sends. Those attacks need test-only profiles (scripted models, and an MCP server of the bench's,
bench/mcp_flood.py), so this figure's processes load them (AGENTMILL_DEV_PROFILES=true); the
profiles B and the first attack use are the production ones either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
from redis.asyncio import Redis

from bench.attack_kinds import FLOOD_ANSWER, FLOOD_DESCRIPTION, FLOOD_TOOLS, profiles
from bench.figure import Figure
from bench.mcp_flood import PATH
from bench.plumbing import ROOT, Plumbing
from bench.probes import pct
from shared.settings import Settings
from tests.support.redis_server import free_port
from tests.support.schema import K, stored

TOKENS = "tok-a=tenant-a,tok-b=tenant-b"
ID_SECRET = "bench-id-secret"
QUOTA_ENV = (
    "AGENTMILL_TENANT_MAX_RUNNING",
    "AGENTMILL_TENANT_MAX_ACTIVE",
    "AGENTMILL_TENANT_SUBMITS_PER_SECOND",
)

ATTACKER_NICE = 19  # the attacker's processes: the lowest CPU priority (the module's docstring)


def lowest() -> None:
    """In an attacker's process before it runs: the lowest CPU priority."""
    os.nice(ATTACKER_NICE)


class IsolationFigures(Plumbing):
    scoping = Settings(id_secret=ID_SECRET)  # the ids the API keeps tenants' runs under

    profiles_path = ROOT / "bench" / "results" / "isolation-profiles.json"

    def _prod_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in self.env(**extra).items() if k not in QUOTA_ENV}  # default quotas
        env["AGENTMILL_DEV_PROFILES"] = "true"  # the attacks' scripted profiles (the module's docstring)
        env["AGENTMILL_PROFILES"] = str(self.profiles_path)
        env["AGENTMILL_ID_SECRET"] = ID_SECRET  # the API names tenants: it refuses to start without one
        return env

    def _spawn_prod(
        self, argv: list[str], env: dict[str, str] | None = None, attacker: bool = False
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, env=env or self._prod_env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=lowest if attacker else None,
        )  # fmt: skip

    async def _victim(
        self, c: httpx.AsyncClient, r: Redis, n: int, until: asyncio.Task[Any] | None = None
    ) -> tuple[list[float], list[float]]:
        """``n`` runs one after another; with ``until``, more until that task (the attack) is over."""
        body = {"inputMessages": [{"role": "user", "content": "6*7"}]}
        submit: list[float] = []
        first: list[float] = []
        while len(submit) < n or (until is not None and not until.done()):
            t0 = time.perf_counter()
            resp = await c.post("/v1/runs", json=body, headers={"Authorization": "Bearer tok-b"})
            t1 = time.perf_counter()
            run_id = stored(self.scoping, "tenant-b", resp.json()["runId"])  # the key it is kept under
            got = await r.xread({K.events(run_id): "0-0"}, count=1, block=10_000)
            t2 = time.perf_counter()
            submit.append((t1 - t0) * 1000)
            first.append((t2 - t0) * 1000 if got else 10_000.0)
            if first.count(10_000.0) >= 3:  # a pool that stopped starting runs: enough said
                break
            await asyncio.sleep(0.05)
        return submit, first

    def _flood(self) -> subprocess.Popen[bytes]:
        """The MCP attack's server, and the profile file that points ``flood`` at it."""
        port = free_port()
        sizes = (FLOOD_TOOLS, FLOOD_DESCRIPTION, FLOOD_ANSWER)
        srv = self._spawn_prod(["-m", "bench.mcp_flood", str(port), *map(str, sizes)], attacker=True)
        self.profiles_path.parent.mkdir(parents=True, exist_ok=True)
        self.profiles_path.write_text(json.dumps(profiles(f"http://127.0.0.1:{port}{PATH}")))
        return srv

    async def fig_isolation(self, r: Redis) -> None:
        await self.flush(r)
        port = free_port()
        flood = self._flood()
        env = self._prod_env(AGENTMILL_API_PORT=str(port), AGENTMILL_API_TOKENS=TOKENS)
        procs = [
            flood,
            self._spawn_prod(["-m", "app.worker"]),
            self._spawn_prod(["-m", "app.cli", "api"], env),
        ]
        self.procs += procs
        url = f"http://127.0.0.1:{port}"
        n = self.args.isolation_samples
        try:
            async with httpx.AsyncClient(base_url=url, timeout=60) as c:
                for _ in range(600):
                    with contextlib.suppress(httpx.HTTPError):
                        if (await c.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)
                await self.wait_started(r)
                # Tenant A's index to list: finished runs of its own, a batch at a time.
                a = {"Authorization": "Bearer tok-a"}
                for _ in range(self.args.isolation_index // 500):
                    runs = [{"inputMessages": [{"role": "user", "content": "1+1"}]}] * 500
                    resp = await c.post("/v1/runs/batch", json={"runs": runs}, headers=a)
                    while resp.status_code == 429:
                        await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
                        resp = await c.post("/v1/runs/batch", json={"runs": runs}, headers=a)
                deadline = time.monotonic() + 300
                while not await self.runs_done(r) and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                base_submit, base_first = await self._victim(c, r, n)
                attack = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bench.attack", url, "tok-a", "180",
                    cwd=ROOT, stdout=asyncio.subprocess.PIPE, env=os.environ.copy(), preexec_fn=lowest,
                )  # fmt: skip
                over = asyncio.create_task(attack.communicate())
                await asyncio.sleep(2.0)  # the attack under way
                hit_submit, hit_first = await self._victim(c, r, n, until=over)
                out, _ = await over
                healthy = (await c.get("/readyz")).status_code
                sent = json.loads(out or b"{}")
                said = (
                    f"attacker sent {sent.get('bombs')} bombs, {sent.get('listings')} listings, "
                    f"{sent.get('methods')} bogus methods; /readyz after: {healthy}"
                )
                self._rows(
                    "9", "one tenant's worst input", (hit_submit, hit_first), (base_submit, base_first), said
                )
                for i, kind in enumerate(self.args.isolation_attacks):
                    hit, said = await self._attack(c, r, url, kind)
                    self._rows(f"9{'bcdefgh'[i]}", f"the {kind} attack", hit, (base_submit, base_first), said)
        finally:
            for p in procs:
                self.stop(p)

    async def _attack(
        self, c: httpx.AsyncClient, r: Redis, url: str, kind: str
    ) -> tuple[tuple[list[float], list[float]], str]:
        """B's samples while tenant A runs one attack of bench/attack_kinds.py, and what A sent."""
        deadline = time.monotonic() + 30
        while not await self.runs_done(r) and time.monotonic() < deadline:  # the last attack's runs end
            await asyncio.sleep(0.2)
        seconds = str(self.args.isolation_attack_s)
        attack = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.attack_kinds", kind, url, "tok-a", seconds,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, env=os.environ.copy(), preexec_fn=lowest,
        )  # fmt: skip
        assert attack.stdout is not None
        ready = await asyncio.wait_for(attack.stdout.readline(), 120)  # its run to fork made, etc.
        over = asyncio.create_task(attack.stdout.readline())  # its clean-up is not measured
        t0 = time.monotonic()
        hit = await self._victim(c, r, self.args.isolation_samples, until=over)
        out, _ = await attack.communicate()
        healthy = (await c.get("/readyz")).status_code
        last = (ready + over.result() + out).strip().splitlines()  # no `ready` if it failed before attacking
        sent = json.loads(last[-1]) if last and last[-1].startswith(b"{") else {}
        said = (
            f"attack {self.args.isolation_attack_s:g} s (B measured for {time.monotonic() - t0:.0f} s): "
            f"A's answers by status {sent.get('sent')}, then {sent.get('aborted')} runs aborted"
            f"{'; errors ' + str(sent['errors']) if sent.get('errors') else ''}; /readyz after: {healthy}"
        )
        return hit, said

    def _rows(
        self,
        number: str,
        attack: str,
        hit: tuple[list[float], list[float]],
        base: tuple[list[float], list[float]],
        said: str,
    ) -> None:
        for name, ours, alone in (
            ("submit → 202", hit[0], base[0]),
            ("submit → first event", hit[1], base[1]),
        ):
            f = Figure(
                f"{number}. another tenant's {name} under {attack} (p99)",
                "ms",
                base_name="the same, alone",
                target="p99 + 100 ms at most",
            )
            f.ours, f.base = [pct(ours, 99)], [pct(alone, 99)]
            f.higher_is_better = False
            more = pct(ours, 99) - pct(alone, 99)
            f.note = (
                f"{'PASS' if more <= 100 else 'FAIL'}: p99 {pct(ours, 99):.0f} ms vs {pct(alone, 99):.0f} ms alone "
                f"({more:+.0f} ms, ×{pct(ours, 99) / max(pct(alone, 99), 1e-9):.2f}), "
                f"p50 {statistics.median(ours):.0f} vs {statistics.median(alone):.0f} ms, n={len(ours)}; {said}; "
                f"the attacker's processes at nice {ATTACKER_NICE}, the pool's at 0"
            )
            self.figures.append(f)
