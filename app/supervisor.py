"""``agentmill worker --processes N``: N worker processes (``python -m app.worker``, each a whole
WorkerProcess with its own worker id and lease) under one supervisor, so a host's cores all work.

The supervisor restarts a process that dies (``restart_delay``: 0.5 s doubling to 30 s while
processes keep dying young; one log line a death, with its exit code or signal). SIGTERM or SIGINT
is passed on to every process: each drains its runs and hands them back, the supervisor waits for
them all and exits 0 (a process still there ``drain_timeout_s`` + 30 s later is killed: its runs
are recovered as a crash's). On Linux a process is sent SIGTERM when its supervisor dies.

Each process serves its /metrics, /healthz and /readyz on a Unix socket of its own; the
supervisor serves one of each on the metrics port: /metrics merged (worker/telemetry/metrics_merge.py),
/healthz 200 while its own event loop beats, /readyz 200 when every process answers its /readyz
with 200 (asked every second).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field

import httpx
import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.exposition import generate_latest

from shared.settings import Settings
from shared.settings_doc import env_names
from worker.process.health import METRICS_TYPE, HealthServer
from worker.telemetry.metrics_merge import MergedMetrics, parse

__all__ = ["Supervisor", "describe_exit", "restart_delay"]

log = logging.getLogger("agentmill.worker")

disable_created_metrics()  # type: ignore[no-untyped-call]  # as the processes' (worker/telemetry/metrics.py)

ASK_S = 1.0  # how often each process's /readyz is asked
STOP_MARGIN_S = 20.0  # a process's drain: drain_timeout_s, up to 10 s more for what it cancels, then this
LIVED_S = 60.0  # a process that ran this long before it died is restarted at once (no backoff)


def restart_delay(deaths: int) -> float:
    """Seconds before restarting a process that died for the ``deaths``-th time in a row (young)."""
    return 0.0 if deaths <= 0 else min(30.0, 0.5 * 2.0 ** (deaths - 1))


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


@dataclass
class Slot:
    """One of the N places: the process in it now, and how its last processes ended."""

    index: int
    socket: str
    proc: asyncio.subprocess.Process | None = None
    ready: bool = False
    deaths: int = 0  # in a row, each after less than LIVED_S
    starts: int = 0
    client: httpx.AsyncClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=self.socket), base_url="http://worker", timeout=5.0
        )


def _variable(setting: str) -> str:
    return env_names(setting, Settings.model_fields[setting])[0]


def _die_with_parent() -> None:  # in the child, before exec (no threads in the supervisor)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class SupervisorServer(HealthServer):
    def __init__(self, sup: Supervisor) -> None:
        super().__init__(CollectorRegistry(), lambda: b"")  # its beat only: the lag is the processes'
        self.sup = sup

    async def answer(self, path: bytes) -> tuple[int, bytes, bytes]:
        if path.startswith(b"/metrics"):
            return 200, await self.sup.metrics(), METRICS_TYPE
        if path.startswith(b"/readyz") and self.health()[0] == 200:
            return (*self.sup.readiness(), b"application/json")
        return await super().answer(path)


class Supervisor:
    def __init__(self, settings: Settings, processes: int) -> None:
        self.settings = settings
        self.dir = tempfile.mkdtemp(prefix="agentmill-worker-")
        self.slots = [Slot(i, os.path.join(self.dir, f"{i}.sock")) for i in range(processes)]
        self.stopping = asyncio.Event()
        self.merged = MergedMetrics()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.merged)
        self.restarts = Counter(
            "agentmill_worker_process_restarts",
            "Worker processes of `agentmill worker --processes` that died and were started again.",
            registry=self.registry,
        )
        Gauge(
            "agentmill_worker_processes",
            "Worker processes this supervisor keeps running.",
            registry=self.registry,
        ).set(processes)

    def child_env(self, slot: Slot) -> dict[str, str]:
        """Its own environment (its settings), and each process's socket and worker id."""
        env = {**os.environ, _variable("worker_metrics_socket"): slot.socket}
        if self.settings.worker_id:  # one id per process and start: runs and leases tell them apart
            env[_variable("worker_id")] = f"{self.settings.worker_id}-{slot.index}.{slot.starts}"
        return env

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        s = self.settings
        server: SupervisorServer | None = None
        if s.worker_metrics_port >= 0:
            server = SupervisorServer(self)
            port = await server.start(s.worker_metrics_host, s.worker_metrics_port)
            log.info("worker supervisor serves /metrics, /healthz and /readyz on %s:%d for %d processes",
                     s.worker_metrics_host, port, len(self.slots))  # fmt: skip
        asker = asyncio.create_task(self._ask_forever())
        try:
            await asyncio.gather(*(self._keep(slot) for slot in self.slots))
        finally:
            asker.cancel()
            await asyncio.gather(asker, return_exceptions=True)
            if server is not None:
                await server.stop()
            for slot in self.slots:
                await slot.client.aclose()
            shutil.rmtree(self.dir, ignore_errors=True)
        log.info("worker supervisor stopped")

    def request_stop(self) -> None:
        if self.stopping.is_set():
            return
        log.info("worker supervisor: stop requested; draining %d processes", len(self.slots))
        self.stopping.set()
        for slot in self.slots:
            self._signal(slot, signal.SIGTERM)

    @staticmethod
    def _signal(slot: Slot, sig: int) -> None:
        if slot.proc is not None and slot.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                slot.proc.send_signal(sig)

    async def _keep(self, slot: Slot) -> None:
        """Slot ``slot``'s process, restarted when it dies, until a stop."""
        while not self.stopping.is_set():
            started = time.monotonic()
            slot.starts += 1
            slot.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "app.worker", env=self.child_env(slot),
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )  # fmt: skip
            if self.stopping.is_set():  # the stop came while it was being started
                self._signal(slot, signal.SIGTERM)
            rc = await self._wait(slot.proc)
            slot.ready = False
            if self.stopping.is_set():
                log.info("worker process %d (pid %d) %s", slot.index, slot.proc.pid, describe_exit(rc))
                return
            self.merged.retire(str(slot.index))
            self.restarts.inc()
            slot.deaths = 1 if time.monotonic() - started >= LIVED_S else slot.deaths + 1
            delay = restart_delay(slot.deaths)
            log.warning("worker process %d (pid %d) %s; starting another in %.1f s",
                        slot.index, slot.proc.pid, describe_exit(rc), delay)  # fmt: skip
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), delay)

    async def _wait(self, proc: asyncio.subprocess.Process) -> int:
        """Its exit code; after a stop, at most the drain's time before it is killed."""
        waiting = asyncio.create_task(proc.wait())
        stop = asyncio.create_task(self.stopping.wait())
        await asyncio.wait({waiting, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not waiting.done():
            grace = self.settings.drain_timeout_s + 10.0 + STOP_MARGIN_S
            try:
                return await asyncio.wait_for(asyncio.shield(waiting), grace)
            except TimeoutError:
                log.warning("worker process (pid %d) still draining after %.0f s: killed", proc.pid, grace)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        return await waiting

    async def _ask_forever(self) -> None:
        while True:
            await asyncio.gather(*(self._ask(slot) for slot in self.slots))
            await asyncio.sleep(ASK_S)

    async def _ask(self, slot: Slot) -> None:
        alive = slot.proc is not None and slot.proc.returncode is None
        try:
            slot.ready = alive and (await slot.client.get("/readyz")).status_code == 200
        except httpx.HTTPError:
            slot.ready = False

    def readiness(self) -> tuple[int, bytes]:
        states = [
            {"process": s.index, "pid": s.proc.pid if s.proc else None, "ready": s.ready} for s in self.slots
        ]
        ok = all(s.ready for s in self.slots) and not self.stopping.is_set()
        return (200 if ok else 503), orjson.dumps(
            {"status": "ok" if ok else "not_ready", "processes": states}
        )

    async def metrics(self) -> bytes:
        """Every process's /metrics now (a process that does not answer: its last), merged."""
        await asyncio.gather(*(self._fetch(slot) for slot in self.slots))
        return generate_latest(self.registry)

    async def _fetch(self, slot: Slot) -> None:
        proc = slot.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            r = await slot.client.get("/metrics")
            families = parse(r.text) if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return
        # not if it died meanwhile: its last counts may already be retired (they would count twice)
        if families is not None and slot.proc is proc and proc.returncode is None:
            self.merged.update(str(slot.index), families)
