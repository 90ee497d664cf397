"""A private PostgreSQL cluster on a free loopback port, for the tests and the bench (as
redis_server.py starts a redis-server): ``initdb`` into a temporary directory, ``pg_ctl`` to start and
stop it (``stop()``/``start()`` keep the port and data, so an outage can be staged). A process runs
``initdb`` once, into a template, and gives each server a copy of it (``cp -a``, a tenth of a second
beside initdb's seconds).

PostgreSQL refuses to run as root; as root the binaries run as the ``postgres`` user (setpriv).
``binaries()`` is None when no PostgreSQL is installed: the tests then skip with that reason.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.ports import free_port

__all__ = ["PostgresServer", "binaries"]


def binaries() -> Path | None:
    """The directory of initdb and pg_ctl (the newest PostgreSQL under /usr/lib/postgresql, else PATH)."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists():
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


_TEMPLATE: Path | None = None


def _template(server: PostgresServer) -> Path:
    """This process's initdb'd data directory (owned as the servers' own are), made on first use."""
    global _TEMPLATE
    if _TEMPLATE is None or not _TEMPLATE.exists():
        d = Path(tempfile.mkdtemp(prefix="agentmill-pg-template-"))
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        if server._user:
            pw = pwd.getpwnam(server._user)
            os.chown(d, pw.pw_uid, pw.pw_gid)
        initdb = [
            "initdb",
            "-D",
            str(d / "data"),
            "-U",
            "agentmill",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        ]
        server._run(*initdb)
        _TEMPLATE = d / "data"
    return _TEMPLATE


class PostgresServer:
    def __init__(self) -> None:
        bindir = binaries()
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl) installed")
        self.bin = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="agentmill-pg-"))
        self.data = self.dir / "data"
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = "postgres"
            pw = pwd.getpwnam(self._user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        subprocess.run(["cp", "-a", str(_template(self)), str(self.data)], check=True, capture_output=True)

    @property
    def url(self) -> str:
        return f"postgresql://agentmill@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self._user:
            cmd = ["setpriv", "--reuid", self._user, "--regid", self._user, "--init-groups", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, cwd=self.dir, timeout=120)

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
