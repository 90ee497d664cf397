"""Real worker processes for integration and chaos tests: start, signal, kill, reap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import forkserver

ROOT = Path(__file__).resolve().parents[2]


class WorkerProc:
    """A process of the project's own entry points: ``python -m app.worker`` unless ``argv`` says otherwise,
    forked from the test process's fork server (tests/support/forkserver.py)."""

    def __init__(
        self,
        redis_url: str,
        *,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        argv: list[str] | None = None,
    ) -> None:
        self.argv = argv or ["-m", "app.worker"]
        self.env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "AGENTMILL_WORKER_METRICS_PORT": "-1",
            "AGENTMILL_POLL_DELAY_S": "0.02",
            **(env or {}),
        }
        self.log_path = log
        self.proc: forkserver.Child | subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProc:
        if self.log_path is None:
            self.proc = forkserver.popen(self.argv, cwd=ROOT, env=self.env)
            return self
        with open(self.log_path, "ab") as out:  # the child keeps its own copy of the descriptor
            self.proc = forkserver.popen(self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=out)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        # send_signal, not os.kill: a child of the fork server that ends on its own is reaped by the
        # server, so between a poll that finds it running and the kill its pid can be gone (the
        # server's Child.send_signal takes that as the end it is); a Popen child stays a zombie.
        if self.proc is not None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(10)

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            self._note_late(timeout)
            self.kill()
        return rc

    def _note_late(self, timeout: float) -> None:
        """A process that outlived its stop's timeout, and its state then (a zombie: it had ended and
        its end was not reported; S or R: it was still draining), on stderr and in the loop-stall log
        (tests/support/loop_watchdog.py) when one is kept."""
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = "gone"
        line = (
            f"{' '.join(self.argv)} (pid {self.pid}) not ended {timeout:.0f} s after SIGTERM; state {state}"
        )
        print(line, file=sys.stderr)
        if log_dir := os.environ.get("AGENTMILL_LOOP_STALL_LOG"):
            with open(Path(log_dir) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log", "a") as f:
                f.write(line + "\n\n")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@contextmanager
def workers(
    redis_url: str, n: int, *, env: dict[str, str] | None = None, log_dir: Path | None = None
) -> Iterator[list[WorkerProc]]:
    procs = [
        WorkerProc(redis_url, env=env, log=(log_dir / f"worker{i}.log") if log_dir else None).start()
        for i in range(n)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            p.stop(timeout=20)


def wait_until(pred: object, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return False
