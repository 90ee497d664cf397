"""The demo's own redis-server: found on PATH, started on a free loopback port with a temp directory,
waited for until it answers PING, stopped (and its directory removed) on close.

Never touches a Redis it did not start. This is the product's only code that starts a server; the
test and bench harness (tests/support/redis_server.py) builds on it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

__all__ = ["EmbeddedRedis", "EmbeddedRedisError", "free_port", "redis_server_binary"]


class EmbeddedRedisError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


class EmbeddedRedis:
    """One redis-server on 127.0.0.1, without persistence unless ``args`` ask for it."""

    def __init__(self, *, port: int | None = None, args: Sequence[str] = ()) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise EmbeddedRedisError("redis-server is not installed (bin/dev installs it on Debian)")
        self.binary = binary
        self.port = port or free_port()
        self.args = tuple(args)
        self._tmp = tempfile.TemporaryDirectory(prefix="agentmill-redis-")
        self.dir = Path(self._tmp.name)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> Self:
        log_file = self.dir / "redis.log"
        argv = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--dir", str(self.dir), "--daemonize", "no", "--loglevel", "warning",
            "--logfile", str(log_file), "--protected-mode", "yes", *self.args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
        try:
            while True:
                try:
                    if client.ping():
                        return self
                except redis.RedisError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
                    self.stop(kill=True)
                    raise EmbeddedRedisError(f"redis-server did not start on port {self.port}: {log}")
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            (self.proc.kill if kill else self.proc.terminate)()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
