"""Figure 12: the peers a user would pick, measured in the same run on the same one-step job
(bench/peer_job.py): bare arq, SAQ, DBOS Transact over PostgreSQL and agentmill, durable for
durable — Redis with AOF ``appendfsync everysec`` against PostgreSQL ``synchronous_commit off``
(both may lose the last second or less of commits), ``always`` against ``on`` (neither loses an
acknowledged one).

Per system and durability level, one worker process with the same concurrency:
- throughput: N jobs submitted first, then the worker started; runs/s = N over the span from the
  first job's start to the last one's finish, as the system's own records state them;
- latency: with that worker warm, jobs submitted at a steady rate (below every system's capacity);
  submit → result is each job's record (created → finished), p50 and p99.
A peer that cannot be installed or started here is skipped with its reason printed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from redis.asyncio import Redis

from bench.figure import Figure
from bench.peer_job import job_input
from bench.plumbing import ROOT, Plumbing
from bench.postgres import PostgresCluster, PostgresError
from tests.support.redis_server import RedisServer

PEERS = ("arq", "saq", "dbos", "agentmill")
# Redis appendfsync -> the PostgreSQL synchronous_commit that loses as much (or as little).
DURABILITY = {"everysec": "off", "always": "on"}


class Peer(Protocol):
    """A peer's harness. It may also have ``async why_lost(keys) -> str``: what its records say of
    the jobs that did not complete, printed beside their count."""

    name: str
    worker_argv: list[str]

    async def connect(self, redis_url: str, db_url: str) -> None: ...
    async def close(self) -> None: ...
    async def reset(self) -> None: ...
    async def enqueue(self, key: str, inp: dict[str, Any]) -> None: ...
    async def done(self) -> bool: ...
    async def records(self, keys: list[str]) -> list[tuple[float, float, float]]: ...


def durability_pairs(levels: list[str]) -> list[tuple[str, str]]:
    """(Redis appendfsync, PostgreSQL synchronous_commit) for each level asked for, in order."""
    return [(level, DURABILITY[level]) for level in levels]


def make_peer(name: str) -> tuple[Peer | None, str]:
    """The peer's harness, or None and why it is skipped (its package is not installed)."""
    need = {"saq": "saq", "dbos": "dbos"}.get(name)
    if need and importlib.util.find_spec(need) is None:
        return None, f"`{need}` is not installed (the `bench` extra: bin/dev true)"
    if name == "arq":
        from bench.peer_arq import ArqPeer

        return ArqPeer(), ""
    if name == "saq":
        from bench.peer_saq import SaqPeer

        return SaqPeer(), ""
    if name == "dbos":
        from bench.peer_dbos import DbosPeer

        return DbosPeer(), ""
    from bench.peer_agentmill import AgentmillPeer

    return AgentmillPeer(), ""


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


@dataclass
class PeerResult:
    peer: str
    level: str
    rates: list[float] = field(default_factory=list)
    p50: float = float("nan")
    p99: float = float("nan")
    skipped: str = ""
    lost: int = 0  # jobs submitted that never completed (left no finished record)
    why_lost: str = ""  # what the peer's records say of them, where its harness can tell (why_lost)


class PeerFigures(Plumbing):
    peers_table: str = ""

    def spawn_logged(self, argv: list[str], log: Path, **env: str) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            p = subprocess.Popen(
                [sys.executable, *argv], cwd=ROOT, env=self.env(**env), stdout=out, stderr=out
            )
        self.procs.append(p)
        return p

    async def wait_done(self, peer: Peer, w: subprocess.Popen[bytes], log: Path, within: float) -> None:
        deadline = time.monotonic() + within
        while not await peer.done():
            if w.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"worker exited ({w.returncode}): {' | '.join(tail)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not drained in {within:.0f} s")
            await asyncio.sleep(0.02)

    async def all_records(
        self, peer: Peer, keys: list[str], within: float = 3.0
    ) -> list[tuple[float, float, float]]:
        """The jobs' records once every one is there (a system may count a job done a moment before
        its record is written), or what there is after ``within`` seconds."""
        deadline = time.monotonic() + within
        while len(recs := await peer.records(keys)) < len(keys) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return recs

    async def measure_peer(self, peer: Peer, res: PeerResult, redis_url: str, db_url: str) -> None:
        a = self.args
        n, m = a.peer_runs, a.peer_latency_runs
        log = Path(tempfile.mkdtemp(prefix="agentmill-peer-")) / "worker.log"
        await peer.connect(redis_url, db_url)
        try:
            await peer.reset()
            env = {
                "REDIS_URL": redis_url,
                "AGENTMILL_PEER_DB_URL": db_url,
                "AGENTMILL_MAX_JOBS": str(a.peer_concurrency),
            }
            lat: list[float] = []
            for rep in range(a.reps):
                keys = [f"t{rep}-{i}" for i in range(n)]
                for k in range(0, n, 100):
                    await asyncio.gather(
                        *(peer.enqueue(key, job_input(i)) for i, key in enumerate(keys[k : k + 100], k))
                    )
                w = self.spawn_logged(peer.worker_argv, log, **env)
                try:
                    await self.wait_done(peer, w, log, 600)
                    recs = await self.all_records(peer, keys)
                    res.lost += n - len(recs)
                    if len(recs) < n and (why := getattr(peer, "why_lost", None)) is not None:
                        res.why_lost = await why(keys)
                    if len(recs) < 0.99 * n:
                        raise RuntimeError(f"only {len(recs)} of {n} jobs completed")
                    span_s = (max(f for _, _, f in recs) - min(s for _, s, _ in recs)) / 1000
                    res.rates.append(n / span_s)
                    if rep == 0:  # the latency pass, on the warm worker, once
                        lkeys = [f"l{i}" for i in range(m)]
                        t0 = time.monotonic()
                        tasks = []
                        for i, key in enumerate(lkeys):
                            await asyncio.sleep(max(0.0, t0 + i / a.peer_rate - time.monotonic()))
                            tasks.append(asyncio.create_task(peer.enqueue(key, job_input(i))))
                        await asyncio.gather(*tasks)
                        await self.wait_done(peer, w, log, 120)
                        lat = [f - c for c, _, f in await self.all_records(peer, lkeys)]
                        if len(lat) < m:
                            raise RuntimeError(f"only {len(lat)} of {m} paced jobs left a record")
                finally:
                    self.stop(w)
            res.p50, res.p99 = statistics.median(lat), pct(lat, 99)
        finally:
            await peer.close()
            shutil.rmtree(log.parent, ignore_errors=True)  # a failure already quoted its tail

    async def fig_peers(self, r: Redis) -> None:
        a = self.args
        pairs = durability_pairs(a.peer_durability)
        harness: dict[str, tuple[Peer | None, str]] = {name: make_peer(name) for name in a.peers}
        pg: PostgresCluster | None = None
        results: list[PeerResult] = []
        try:
            if harness.get("dbos", (None, ""))[0] is not None:
                pg = PostgresCluster()  # assigned first: an interrupted start is still cleaned up
                try:
                    pg.start()
                except (PostgresError, OSError, subprocess.SubprocessError) as exc:
                    harness["dbos"] = (None, f"no private PostgreSQL: {exc}")
                    pg.close()
                    pg = None
            for fsync, sync_commit in pairs:
                server = RedisServer(appendonly=True, appendfsync=fsync)
                server.start()
                try:
                    db_url = pg.create_database(f"peers_{sync_commit}", sync_commit) if pg else ""
                    for name, (peer, why) in harness.items():
                        res = PeerResult(name, fsync, skipped=why)
                        results.append(res)
                        if peer is None:
                            print(f"peers: {name} skipped: {why}", file=sys.stderr)
                            continue
                        try:
                            await self.measure_peer(peer, res, server.url, db_url)
                        except Exception as exc:  # one peer that fails here must not cost the others
                            res.skipped = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
                            print(f"peers: {name} at {fsync} not measured: {res.skipped}", file=sys.stderr)
                finally:
                    server.close()
        finally:
            if pg is not None:
                pg.close()
        self.record_peers(results, pairs)

    def record_peers(self, results: list[PeerResult], pairs: list[tuple[str, str]]) -> None:
        a = self.args
        setup = (
            f"one worker process each, concurrency {a.peer_concurrency}, N={a.peer_runs} × {a.reps} reps "
            f"(throughput), {a.peer_latency_runs} jobs at {a.peer_rate:g}/s (latency), poll delay "
            f"{a.poll_delay:g} s (arq, agentmill, DBOS queue polling; SAQ blocks)"
        )
        names = {"arq": "bare arq", "saq": "SAQ", "dbos": "DBOS Transact", "agentmill": "agentmill"}
        lines = ["", f"12. peers — the same one-step job; {setup}"]
        head = f"{'durability':<44} {'system':<14} {'runs/s':>24} {'p50 ms':>8} {'p99 ms':>8}"
        lines += [head, "-" * len(head)]
        for fsync, sync_commit in pairs:
            ours = next((x for x in results if x.peer == "agentmill" and x.level == fsync), None)
            for res in (x for x in results if x.level == fsync):
                store = (
                    f"PostgreSQL synchronous_commit {sync_commit}"
                    if res.peer == "dbos"
                    else f"Redis AOF appendfsync {fsync}"
                )
                if res.skipped:
                    lines.append(f"{store:<44} {names[res.peer]:<14} skipped: {res.skipped}")
                    continue
                why = f": {res.why_lost}" if res.why_lost else ""
                lost = (
                    f"  ({res.lost} of {a.peer_runs * a.reps} jobs did not complete{why})" if res.lost else ""
                )
                lines.append(
                    f"{store:<44} {names[res.peer]:<14} {self.fmt_rates(res.rates):>24} {res.p50:>8.1f} {res.p99:>8.1f}{lost}"
                )
                if ours and ours.rates and res.peer != "agentmill":
                    self.figures.append(
                        Figure(
                            f"12. peers, {fsync}/sync_commit {sync_commit}: agentmill vs {names[res.peer]}",
                            "runs/s",
                            ours=ours.rates,
                            base=res.rates,
                            base_name=f"{names[res.peer]} ({store})",
                            note=f"p99 submit → result: agentmill {ours.p99:.1f} ms, {names[res.peer]} {res.p99:.1f} ms (setup: table 11 below)",
                        )
                    )
        self.peers_table = "\n".join(lines)

    @staticmethod
    def fmt_rates(xs: list[float]) -> str:
        if not xs:
            return "–"
        m = statistics.median(xs)
        return f"{m:,.0f}" if len(xs) == 1 else f"{m:,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"
