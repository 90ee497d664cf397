"""The chaos harness: many multi-step runs whose tools write to a ledger, while workers die.

Kills workers with SIGKILL at random times and at chosen points (failpoints: after a tool's side
effect but before its result is recorded; after events were published but before the checkpoint),
pauses one with SIGSTOP past its lease, sends one SIGTERM, and restarts Redis (AOF) once. Then it
checks the promises from the stream, the run hashes and the ledger, and prints a table.

With ``cluster=True`` it runs on a local Redis Cluster (three masters, three replicas) instead:
runs spread over 16 partitions, some of them in sessions with ids of the client's choosing (they
live away from their home partition), an API process serving reads throughout, and, in place of
the Redis restart, a manual failover and a SIGKILLed master (which later rejoins as a replica).

Short versions: tests/chaos/test_chaos.py, tests/cluster/test_cluster_chaos.py. Longer:
``python -m tests.chaos.harness --runs 300 --seconds 120`` (``--cluster`` for the cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from redis.asyncio import Redis

from producer.service import Producer, Submitted
from shared.events import decode_entry
from shared.fields import RunField
from shared.keys import Partition
from shared.partitions import Partitions
from shared.profiles import load_profiles
from shared.settings import Settings
from tests.support.ledger import Ledger
from tests.support.procs import WorkerProc
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.redis_server import RedisServer, free_port


@dataclass
class ChaosConfig:
    runs: int = 40
    steps: int = 4
    workers: int = 3
    seconds: float = 40.0  # how long the chaos lasts; runs keep going after it until done
    lease_ms: int = 2_000
    kill_every_s: float = 4.0
    failpoints: str = "after_tool_effect:0.04,after_delta_publish:0.03"
    redis_restart: bool = True
    sigstop: bool = True
    sigterm: bool = True
    finish_timeout_s: float = 120.0
    seed: int = 7
    model_ms: tuple[int, int] = (200, 500)  # per step: the model's answer time
    tool_ms: tuple[int, int] = (100, 300)  # per step: the ledger's answer time
    cluster: bool = False  # a local Redis Cluster (failover + killed master) instead of one Redis
    sessions: int = 0  # runs of this many sessions, three runs each, with ids the client chose
    # The ledger declared sideEffects: false, with a hold longer than its answers: a reply and its
    # call's result go out in one commit, and a worker lost in between may have run the call.
    # bin/dev test's third pass sets AGENTMILL_CHAOS_DECLARED=1: its chaos runs are of declared calls.
    declared: bool = field(default_factory=lambda: os.environ.get("AGENTMILL_CHAOS_DECLARED") == "1")


@dataclass
class ChaosReport:
    submitted: int = 0
    completed: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    lost_runs: list[str] = field(default_factory=list)  # each: id, status, owner, epoch, last event
    duplicate_seqs: int = 0
    gaps: int = 0
    recorded_results_reexecuted: int = 0
    reexecuted_after_crash: int = 0
    declared_rerun_before_record: int = 0
    model_calls_repeated_after_checkpoint: int = 0
    calls_sharing_a_record: int = 0
    max_concurrent_writers: int = 0
    kills: int = 0
    failpoint_deaths: int = 0
    sigstops: int = 0
    sigterms: int = 0
    redis_restarts: int = 0
    recovery_s: list[float] = field(default_factory=list)
    recovery_by_kill_s: list[float] = field(default_factory=list)  # each SIGKILL: the median of its runs'
    load_at_kills: list[float] = field(default_factory=list)  # the 1-minute load average at each SIGKILL
    tool_executions: int = 0
    elapsed_s: float = 0.0
    failovers: int = 0
    masters_killed: int = 0
    runs_per_master: dict[str, int] = field(default_factory=dict)
    api_reads: int = 0
    api_failed_reads: int = 0
    api_failed_after_faults: int = 0

    def figures(self) -> dict[str, Any]:
        rec = sorted(self.recovery_s)
        return {
            "runs submitted": self.submitted,
            "completed": self.completed,
            "failed (by reason)": dict(self.failed) or 0,
            "lost (must be 0)": self.lost,
            "the lost runs (id status owner epoch, last event)": "; ".join(self.lost_runs) or "-",
            "duplicate seqs (must be 0)": self.duplicate_seqs,
            "seq gaps (must be 0)": self.gaps,
            "recorded tool results executed again (must be 0)": self.recorded_results_reexecuted,
            "tool calls executed twice after a worker died mid-call": self.reexecuted_after_crash,
            "of them declared calls run again before any record (allowed)": self.declared_rerun_before_record,
            "model calls repeated after a checkpoint (must be 0)": self.model_calls_repeated_after_checkpoint,
            "tool calls without a record of their own (must be 0)": self.calls_sharing_a_record,
            "most workers writing one run at once (must be 1)": self.max_concurrent_writers,
            "SIGKILLs (random) / failpoint deaths": f"{self.kills} / {self.failpoint_deaths}",
            "SIGSTOP / SIGTERM / Redis restarts": f"{self.sigstops} / {self.sigterms} / {self.redis_restarts}",
            "recovery after SIGKILL p50 / p99 (s)": (
                f"{statistics.median(rec):.2f} / {rec[min(len(rec) - 1, int(len(rec) * 0.99))]:.2f} (n={len(rec)})"
                if rec
                else "n/a"
            ),
            "recovery per SIGKILL p50 (s) / load average at the kills": (
                f"{statistics.median(self.recovery_by_kill_s):.2f} (n={len(self.recovery_by_kill_s)}) / "
                f"{max(self.load_at_kills, default=0.0):.1f} max"
                if self.recovery_by_kill_s
                else "n/a"
            ),
            "tool executions recorded by the ledger": self.tool_executions,
            "elapsed (s)": round(self.elapsed_s, 1),
            **(
                {
                    "runs per master (partition slots at the start)": self.runs_per_master,
                    "manual failovers / masters SIGKILLed": f"{self.failovers} / {self.masters_killed}",
                    "API reads / failed / failed once the faults were over": (
                        f"{self.api_reads} / {self.api_failed_reads} / {self.api_failed_after_faults}"
                    ),
                }
                if self.runs_per_master
                else {}
            ),
        }

    def table(self) -> str:
        rows = self.figures()
        width = max(len(k) for k in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows.items())

    def violations(self) -> list[str]:
        bad = []
        if self.lost:
            bad.append(f"{self.lost} runs lost")
        if self.duplicate_seqs or self.gaps:
            bad.append(f"stream seqs: {self.duplicate_seqs} duplicates, {self.gaps} gaps")
        if self.recorded_results_reexecuted:
            bad.append(f"{self.recorded_results_reexecuted} recorded tool results executed again")
        if self.model_calls_repeated_after_checkpoint:
            bad.append(
                f"{self.model_calls_repeated_after_checkpoint} model calls repeated after a checkpoint"
            )
        if self.calls_sharing_a_record:
            bad.append(f"{self.calls_sharing_a_record} tool calls without a record of their own")
        if self.max_concurrent_writers > 1:
            bad.append(f"{self.max_concurrent_writers} workers wrote one run at once")
        if self.api_failed_after_faults:
            bad.append(f"{self.api_failed_after_faults} API reads failed after the faults were over")
        return bad


def chaos_profiles(ledger_url: str, path: Path, *, declared: bool = False, timeout_s: float = 10) -> Path:
    doc = {
        "profiles": [
            {
                "name": "chaos",
                "provider": {"kind": "scripted", "mode": "script", "chunkChars": 4},
                "tools": ["echo"],
                "httpTools": [
                    {
                        "name": "ledger",
                        "description": "Record a step in the ledger.",
                        "parameters": {
                            "type": "object",
                            "properties": {"step": {"type": "integer"}, "delayMs": {"type": "integer"}},
                            "required": ["step"],
                        },
                        "url": ledger_url,
                        "allowHosts": ["127.0.0.1"],
                    }
                ],
                "toolSettings": {
                    "ledger": {"timeoutS": timeout_s, "maxTries": 3, "retryDelayMs": 100}
                    | ({"sideEffects": False} if declared else {})
                },
                "retry": {"baseDelayMs": 100, "maxDelayMs": 500},
            }
        ]
    }
    path.write_bytes(orjson.dumps(doc))
    load_profiles(str(path))  # fail early on a bad profile
    return path


def run_body(i: int, cfg: ChaosConfig, rng: random.Random) -> dict[str, Any]:
    """Run ``i``; the first ``3 * cfg.sessions`` runs go three to a session, under ids they chose."""
    body = _steps(i, cfg, rng)
    if i < 3 * cfg.sessions:
        body.update(runId=f"chaos-{i}", sessionId=f"chaos-s{i // 3}", autoCreateSession=True)
    return body


def _steps(i: int, cfg: ChaosConfig, rng: random.Random) -> dict[str, Any]:
    script: list[dict[str, Any]] = []
    for s in range(cfg.steps):
        script.append(
            {
                "text": f"step {s} of run {i}: thinking out loud",
                "delayMs": rng.randint(*cfg.model_ms),
                # call_0 every step, as servers that count per reply say: agentmill names the calls
                "toolCalls": [
                    {
                        "id": "call_0",
                        "name": "ledger",
                        "arguments": {"step": s, "delayMs": rng.randint(*cfg.tool_ms)},
                    }
                ],
            }
        )
    script.append({"text": f"run {i} finished", "delayMs": 50})
    return {"agent": "chaos", "inputMessages": [{"role": "user", "content": f"chaos run {i}"}],
            "runtimeHints": {"script": script}}  # fmt: skip


class Chaos:
    def __init__(self, cfg: ChaosConfig, log_dir: Path) -> None:
        self.cfg = cfg
        self.log_dir = log_dir
        self.rng = random.Random(cfg.seed)
        self.report = ChaosReport()
        self.procs: list[WorkerProc] = []
        self.n_started = 0
        self.expected_deaths: set[int] = set()
        self.kill_marks: list[tuple[float, str]] = []  # (time, worker id) of each SIGKILL
        self.url = ""
        self.parts: Partitions[Redis] | None = None
        self.where: dict[str, Partition] = {}  # each run's partition
        self.faults_over_at = float("inf")

    def _env(self, profiles: Path, with_failpoints: bool) -> dict[str, str]:
        env = {
            "AGENTMILL_PROFILES": str(profiles),
            "AGENTMILL_LEASE_MS": str(self.cfg.lease_ms),
            "AGENTMILL_HEARTBEAT_MS": "300",
            "AGENTMILL_RECONCILE_MS": "500",
            "AGENTMILL_MAX_RUN_CRASHES": "50",
            "AGENTMILL_SHUTDOWN_GRACE_S": "5",
            "AGENTMILL_QUEUED_CHECK_MS": "3000",
            # Small claims spread the runs over the workers, as in a pool under steady load; with the
            # default batch the first worker to poll takes every run, and each kill orphans them all.
            "AGENTMILL_CLAIM_BATCH": "4",
            "AGENTMILL_WORKER_ID": f"chaos-w{self.n_started}",
            "AGENTMILL_REDIS_CLUSTER": "true" if self.cfg.cluster else "false",
        }
        if with_failpoints:
            env["AGENTMILL_FAILPOINTS"] = self.cfg.failpoints
        if self.cfg.declared:
            env["AGENTMILL_STEP_HOLD_MS"] = "2000"
        return env

    def _spawn(self, url: str, profiles: Path) -> WorkerProc:
        with_fp = self.n_started % 2 == 1  # every other worker may die at a failpoint
        p = WorkerProc(
            url, env=self._env(profiles, with_fp), log=self.log_dir / f"worker{self.n_started}.log"
        ).start()
        p.worker_id = f"chaos-w{self.n_started}"  # type: ignore[attr-defined]
        self.n_started += 1
        return p

    async def run(self) -> ChaosReport:
        t_start = time.monotonic()
        with Ledger() as ledger:
            if self.cfg.cluster:
                with LocalRedisCluster(masters=3, replicas_per_master=1, node_timeout_ms=1000) as cluster:
                    await self._run(cluster.url, ledger, cluster=cluster)
            else:
                with RedisServer(appendonly=True, appendfsync="everysec") as server:
                    await self._run(server.url, ledger, server=server)
        self.report.elapsed_s = time.monotonic() - t_start
        return self.report

    async def _run(
        self,
        url: str,
        ledger: Ledger,
        *,
        server: RedisServer | None = None,
        cluster: LocalRedisCluster | None = None,
    ) -> None:
        cfg = self.cfg
        self.url = url
        profiles = chaos_profiles(ledger.url, self.log_dir / "profiles.json", declared=cfg.declared)
        settings = Settings(redis_url=url, profiles=str(profiles), redis_cluster=cfg.cluster)
        parts: Partitions[Redis] = Partitions.from_settings(settings, retries=5)
        await parts.start()
        self.parts = parts
        api: WorkerProc | None = None
        reader: asyncio.Task[None] | None = None
        try:
            producer = Producer(parts, settings=settings, profiles=load_profiles(str(profiles)))
            subs = await producer.submit_many([run_body(i, cfg, self.rng) for i in range(cfg.runs)])
            run_ids = [s.run_id for s in subs if isinstance(s, Submitted)]
            self.report.submitted = len(run_ids)
            for rid in run_ids:
                part = await parts.locate(rid)
                assert part is not None, rid
                self.where[rid] = part
            if cluster is not None:
                per: Counter[str] = Counter(str(cluster.master_for_slot(p.slot)) for p in self.where.values())
                self.report.runs_per_master = dict(sorted(per.items()))
                api, api_url = self._start_api(url)
                reader = asyncio.create_task(self._read_through_api(api_url, run_ids))
            self.procs = [self._spawn(url, profiles) for _ in range(cfg.workers)]
            await self._until_carried()
            await self._chaos(profiles, server, cluster)
            self.faults_over_at = time.monotonic() + 8.0  # a killed master's partitions come back by then
            await self._wait_done(run_ids, profiles)
            if reader is not None:
                await asyncio.sleep(max(0.0, self.faults_over_at - time.monotonic()) + 1.0)
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            await self._check(run_ids, ledger)
        finally:
            for p in self.procs:
                p.stop(timeout=15)
            if api is not None:
                api.stop(timeout=10)
            await parts.aclose()

    def _start_api(self, url: str) -> tuple[WorkerProc, str]:
        port = free_port()
        api = WorkerProc(
            url,
            argv=["-m", "app.cli", "api"],
            env={"AGENTMILL_API_PORT": str(port), "AGENTMILL_AUTH_DISABLED": "true",
                 "AGENTMILL_REDIS_CLUSTER": "true"},
            log=self.log_dir / "api.log",
        ).start()  # fmt: skip
        return api, f"http://127.0.0.1:{port}"

    async def _read_through_api(self, api_url: str, run_ids: list[str]) -> None:
        """Read random runs through the API all along: it must keep answering (a read may fail only
        while a killed master's partitions have no master yet)."""
        async with httpx.AsyncClient(base_url=api_url, timeout=5.0) as http:
            while True:
                rid = self.rng.choice(run_ids)
                try:
                    ok = (await http.get(f"/v1/runs/{rid}")).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.report.api_reads += 1
                if not ok:
                    self.report.api_failed_reads += 1
                    if time.monotonic() > self.faults_over_at:
                        self.report.api_failed_after_faults += 1
                await asyncio.sleep(0.05)

    async def _fields(self, field_name: str, run_ids: list[str] | None = None) -> dict[str, bytes | None]:
        """One field of every run's hash, one pipeline per partition."""
        assert self.parts is not None
        by_part: dict[int, list[str]] = defaultdict(list)
        for rid in self.where if run_ids is None else run_ids:
            by_part[self.where[rid].index].append(rid)
        out: dict[str, bytes | None] = {}

        async def read(index: int, rids: list[str]) -> None:
            part = self.parts.parts[index]  # type: ignore[union-attr]

            async def get(c: Redis) -> list[Any]:
                async with c.pipeline(transaction=False) as pipe:
                    for rid in rids:
                        pipe.hget(part.run(rid), field_name)
                    return list(await pipe.execute())

            values = await self.parts.call(part, get)  # type: ignore[union-attr]
            out.update(zip(rids, values, strict=True))

        await asyncio.gather(*(read(i, rids) for i, rids in by_part.items()))
        return out

    async def _owners(self) -> dict[str, str]:
        return {rid: o.decode() for rid, o in (await self._fields("owner")).items() if o}

    async def _until_carried(self, within_s: float = 60.0) -> None:
        """Faults start once workers carry runs: on a cold machine a worker takes seconds to import."""
        deadline = time.monotonic() + within_s
        while not await self._owners():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no worker took a run within {within_s:.0f} s; see {self.log_dir}")
            await asyncio.sleep(0.1)

    async def _kill(self, victim: WorkerProc, sig: int) -> None:
        owners = await self._owners()
        wid = victim.worker_id  # type: ignore[attr-defined]
        now = time.time()
        self.report.load_at_kills.append(os.getloadavg()[0])
        for rid, owner in owners.items():
            if owner == wid:
                self.kill_marks.append((now, rid))
        self.expected_deaths.add(victim.pid)
        victim.signal(sig)

    async def _chaos(
        self, profiles: Path, server: RedisServer | None, cluster: LocalRedisCluster | None
    ) -> None:
        cfg = self.cfg
        end = time.monotonic() + cfg.seconds
        next_kill = time.monotonic() + cfg.kill_every_s * 0.5
        stop_at = time.monotonic() + cfg.seconds * 0.3 if cfg.sigstop else None
        term_at = time.monotonic() + cfg.seconds * 0.5 if cfg.sigterm else None
        redis_at = time.monotonic() + cfg.seconds * 0.7 if cfg.redis_restart else None
        failover_at = time.monotonic() + cfg.seconds * 0.4 if cluster is not None else None
        killed: tuple[int, float] | None = None  # a killed master's port, when it comes back
        stopped: tuple[WorkerProc, float] | None = None
        while time.monotonic() < end:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            self._replace_dead(profiles)
            live = [p for p in self.procs if p.alive]
            if now >= next_kill and live:
                owning = set((await self._owners()).values())
                busy = [p for p in live if p.worker_id in owning]  # type: ignore[attr-defined]
                await self._kill(self.rng.choice(busy or live), signal.SIGKILL)
                self.report.kills += 1
                next_kill = now + cfg.kill_every_s * self.rng.uniform(0.5, 1.5)
            if stop_at is not None and now >= stop_at and live:
                victim = self.rng.choice(live)
                victim.signal(signal.SIGSTOP)
                stopped = (victim, now + cfg.lease_ms / 1000.0 * 2 + 1.0)
                self.report.sigstops += 1
                stop_at = None
            if stopped is not None and now >= stopped[1]:
                stopped[0].signal(signal.SIGCONT)  # it wakes up fenced: its writes are refused
                stopped = None
            if term_at is not None and now >= term_at and live:
                victim = self.rng.choice([p for p in live if stopped is None or p is not stopped[0]] or live)
                self.expected_deaths.add(victim.pid)
                victim.signal(signal.SIGTERM)
                self.report.sigterms += 1
                term_at = None
            if failover_at is not None and cluster is not None and now >= failover_at:
                # The master of the partition with the most runs hands over to its replica.
                await asyncio.to_thread(cluster.failover, self._busiest_slot())
                self.report.failovers += 1
                failover_at = None
            if redis_at is not None and now >= redis_at:
                if cluster is not None:
                    port = await asyncio.to_thread(cluster.kill_master, self._busiest_slot(), wait=False)
                    self.report.masters_killed += 1
                    killed = (port, now + 5.0)
                elif server is not None:
                    await asyncio.to_thread(server.restart, 1.0, kill=False)
                    self.report.redis_restarts += 1
                redis_at = None
            if killed is not None and cluster is not None and now >= killed[1]:
                await asyncio.to_thread(cluster.restart_node, killed[0])  # back as a replica
                killed = None
        if stopped is not None:
            stopped[0].signal(signal.SIGCONT)
        if killed is not None and cluster is not None:
            await asyncio.to_thread(cluster.restart_node, killed[0])

    def _busiest_slot(self) -> int:
        counts = Counter(p.slot for p in self.where.values())
        return counts.most_common(1)[0][0]

    def _replace_dead(self, profiles: Path) -> None:
        for i, p in enumerate(self.procs):
            if not p.alive:
                if p.pid not in self.expected_deaths:
                    self.report.failpoint_deaths += 1
                self.procs[i] = self._spawn(self.url, profiles)

    async def _wait_done(self, run_ids: list[str], profiles: Path) -> None:
        deadline = time.monotonic() + self.cfg.finish_timeout_s
        while time.monotonic() < deadline:
            self._replace_dead(profiles)
            try:
                statuses = await self._fields("status", run_ids)
            except Exception:
                await asyncio.sleep(0.25)
                continue
            if all(s in (b"completed", b"failed", b"aborted") for s in statuses.values()):
                return
            await asyncio.sleep(0.25)

    async def _check(self, run_ids: list[str], ledger: Ledger) -> None:
        r = self.report
        assert self.parts is not None
        await self.parts.topology.refresh()  # after a failover, read each partition's new master
        failed: Counter[str] = Counter()
        first_event_after_kill: dict[str, list[float]] = defaultdict(list)
        for rid in run_ids:
            part = self.where[rid]
            redis = self.parts.client(part)
            h = await redis.hgetall(part.run(rid))
            status = h.get(b"status", b"").decode()
            if status == "completed":
                r.completed += 1
            elif status in ("failed", "aborted"):
                failed[orjson.loads(h[b"result"])["lastError"]["code"]] += 1
            entries = await redis.xrange(part.events(rid))
            if status not in ("completed", "failed", "aborted"):
                r.lost += 1
                last = entries[-1][1] if entries else {}
                r.lost_runs.append(
                    f"{rid} {status or '-'} {h.get(RunField.OWNER.encode(), b'-').decode()} {h.get(RunField.EPOCH.encode(), b'-').decode()},"
                    f" {last.get(b'kind', b'-').decode()} seq {last.get(b'seq', b'-').decode()}"
                )
            seqs = [int(f[b"seq"]) for _, f in entries]
            r.duplicate_seqs += len(seqs) - len(set(seqs))
            r.gaps += 0 if seqs == list(range(1, len(seqs) + 1)) else 1
            epochs = [int(f[b"epoch"]) for _, f in entries]
            # Epochs never go back along the stream: no two workers' writes interleave.
            interleaved = any(b < a for a, b in itertools.pairwise(epochs))
            r.max_concurrent_writers = max(r.max_concurrent_writers, 2 if interleaved else 1)
            events = [decode_entry(rid, f) for _, f in entries]
            per_call = Counter(e.payload["modelCallIndex"] for e in events if e.kind == "assistant_message")
            r.model_calls_repeated_after_checkpoint += sum(n - 1 for n in per_call.values())
            for ts, _ in [(e.ts / 1000.0, e) for e in events]:
                first_event_after_kill[rid].append(ts)
            tools = {k.decode(): orjson.loads(v) for k, v in (await redis.hgetall(part.tools(rid))).items()}
            if status == "completed":  # one record per step's call, though the model said call_0 each time
                r.calls_sharing_a_record += max(0, self.cfg.steps - len(tools))
            counts = ledger.counts()
            for call_id, rec in tools.items():
                key = f"{rid}:{call_id}"
                n = counts.get(key, 0)
                if self.cfg.declared:
                    # Executions the claims did not count may come before the record (a worker lost
                    # while it held the reply); none may come after it: a fencing token above the
                    # recording worker's epoch is an execution by a later worker.
                    after = sum(1 for t in ledger.tokens.get(key, []) if t and int(t) > rec.get("epoch", 0))
                    r.recorded_results_reexecuted += after
                    r.declared_rerun_before_record += 1 if n > rec.get("attempts", 1) else 0
                elif n > rec.get("attempts", 1):
                    r.recorded_results_reexecuted += n - rec.get("attempts", 1)
                if n > 1:
                    r.reexecuted_after_crash += 1
        r.failed = dict(failed)
        r.tool_executions = sum(ledger.counts().values())
        by_kill: dict[float, list[float]] = defaultdict(list)
        for t_kill, rid in self.kill_marks:
            later = [ts for ts in first_event_after_kill[rid] if ts > t_kill]
            if later:
                r.recovery_s.append(min(later) - t_kill)
                by_kill[t_kill].append(min(later) - t_kill)
        r.recovery_by_kill_s = [statistics.median(v) for _, v in sorted(by_kill.items())]


def main(argv: list[str] | None = None) -> int:
    # Its runs use the test-only scripted model (the tests' conftest sets this for pytest); the
    # workers it starts inherit it.
    os.environ.setdefault("AGENTMILL_DEV_PROFILES", "true")
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--cluster", action="store_true", help="on a local Redis Cluster (failover, killed master)"
    )
    ap.add_argument("--sessions", type=int, default=0, help="runs of this many sessions, three each")
    ap.add_argument(
        "--declared",
        action="store_true",
        help="the ledger declared sideEffects: false (a reply and its result in one commit)",
    )
    args = ap.parse_args(argv)
    cfg = ChaosConfig(runs=args.runs, steps=args.steps, workers=args.workers, seconds=args.seconds,
                      finish_timeout_s=max(180.0, args.seconds * 2), cluster=args.cluster,
                      sessions=args.sessions, declared=args.declared)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="agentmill-chaos-") as d:
        report = asyncio.run(Chaos(cfg, Path(d)).run())
    print(report.table())
    if args.json:
        args.json.write_text(json.dumps(report.figures(), indent=2))
    bad = report.violations()
    for b in bad:
        print("VIOLATION:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
