"""A private redis-server on a free loopback port, for the demo, the tests and the bench.

Never touches a Redis it did not start. ``restart()`` keeps the port and data directory, so AOF
persistence can be exercised across a restart.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

__all__ = ["RedisServer", "RedisServerError", "free_port", "redis_server_binary"]


class RedisServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


class RedisServer:
    def __init__(
        self, *, appendonly: bool = False, appendfsync: str = "everysec", port: int | None = None
    ) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RedisServerError("redis-server is not installed (bin/dev installs it on Debian)")
        self.binary = binary
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self._tmp = tempfile.TemporaryDirectory(prefix="agentmill-redis-")
        self.dir = Path(self._tmp.name)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", self.appendfsync,
            "--dir", str(self.dir), "--daemonize", "no", "--loglevel", "warning",
            "--logfile", str(self.dir / "redis.log"), "--protected-mode", "yes",
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
                    log = (
                        (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                        if (self.dir / "redis.log").exists()
                        else ""
                    )
                    raise RedisServerError(f"redis-server did not start on port {self.port}: {log}")
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

    def restart(self, down_s: float = 0.0, *, kill: bool = True) -> None:
        self.stop(kill=kill)
        if down_s:
            time.sleep(down_s)
        self.start()

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
