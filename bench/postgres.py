"""A private PostgreSQL cluster for the peers figure: initdb and pg_ctl in a temporary directory, on
a free loopback port, no system service (as the tests start redis-server).

PostgreSQL refuses to run as root; as root the cluster runs as the ``postgres`` user (runuser).
``synchronous_commit`` is set per database, so one cluster serves both durability levels.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.redis_server import free_port

PG_BIN_DIRS = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")
SERVICE_USER = "postgres"


class PostgresError(RuntimeError):
    pass


def pg_bin_dir() -> Path | None:
    for d in (os.environ.get("AGENTMILL_PG_BIN", ""), *PG_BIN_DIRS):
        if d and (Path(d) / "initdb").is_file():
            return Path(d)
    return None


class PostgresCluster:
    """initdb + pg_ctl start on 127.0.0.1:<free port>; ``close()`` stops it and removes the directory."""

    def __init__(self) -> None:
        self.bin = pg_bin_dir()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="agentmill-pg-"))
        self.data = self.dir / "data"
        self.started = False

    def _as_owner(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", SERVICE_USER, "--", *argv]
        return argv

    def _run(self, argv: list[str], timeout: float = 120) -> str:
        p = subprocess.run(self._as_owner(argv), capture_output=True, text=True, timeout=timeout, check=False)
        if p.returncode:
            raise PostgresError(f"{Path(argv[0]).name} failed: {p.stderr.strip() or p.stdout.strip()}")
        return p.stdout

    def start(self) -> PostgresCluster:
        if self.bin is None:
            raise PostgresError("no PostgreSQL binaries (initdb) under " + ", ".join(PG_BIN_DIRS))
        if os.geteuid() == 0:
            shutil.chown(self.dir, SERVICE_USER)
        self._run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", "bench", "-A", "trust", "-E", "UTF8"]
        )
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=on "
            "-c max_connections=200 -c shared_buffers=128MB"
        )
        self.started = True  # before the start returns: close() stops even a start it interrupted
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.dir / "log"),
                "-o",
                opts,
                "-w",
                "start",
            ]
        )
        return self

    def create_database(self, name: str, synchronous_commit: str) -> str:
        """A fresh database with its own ``synchronous_commit``; returns its SQLAlchemy URL."""
        if self.bin is None:
            raise PostgresError("no PostgreSQL binaries (psql) under " + ", ".join(PG_BIN_DIRS))
        psql = [
            str(self.bin / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "bench",
            "-d",
            "postgres",
        ]
        self._run([*psql, "-c", f"DROP DATABASE IF EXISTS {name}"])
        self._run([*psql, "-c", f"CREATE DATABASE {name}"])
        self._run([*psql, "-c", f"ALTER DATABASE {name} SET synchronous_commit = {synchronous_commit}"])
        return f"postgresql+psycopg://bench@127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        if self.started and self.bin is not None:
            subprocess.run(
                self._as_owner([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]),
                capture_output=True,
                timeout=60,
                check=False,
            )
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)
