"""The CLI as a user runs it: ``python -m app.cli`` in a child process (forked from the test process's
fork server: tests/support/forkserver.py), on the test's Redis."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tests.support import forkserver

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["ROOT", "cli"]


def cli(
    redis_url: str, *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    journals = str(Path(tempfile.gettempdir()) / "agentmill-cli-tests")  # submit's, not the user's
    env = {**os.environ, "REDIS_URL": redis_url, "COLUMNS": "200", "AGENTMILL_CLI_STATE_DIR": journals,
           **(env or {})}  # fmt: skip
    return forkserver.run(["-m", "app.cli", *args], cwd=ROOT, env=env, timeout=timeout)
