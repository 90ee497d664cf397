"""The server as a user installs it into their own environment: README's install command, exactly,
in a fresh venv; then that venv's ``agentmill worker`` and ``agentmill submit --wait`` run a batch
on a real redis-server to its end, and ``agentmill status`` shows the run's answer.

The command is run by ``uv pip install`` (pip's arguments, uv's cache): from the local cache when it
holds every package (``--offline``: about 3 s), else once from the index, which fills the cache for
the next time (about 8 s). A machine with neither the cache nor the network skips the test."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
UV = str(Path(sys.executable).parent / "uv")
# README's one install command for the server (from a checkout): `pip install <arguments>`.
COMMAND = re.compile(r"^pip install (\./clients/python [^#\n]*?)\s*(?:#.*)?$", re.M)
RUN = (
    b'{"agent": "scripted", "inputMessages": [{"role": "user", "content": "hi"}],'
    b' "runtimeHints": {"script": [{"text": "installed and answering"}]}}\n'
)


def documented_command() -> str:
    """The arguments of README's first `pip install` of the server (the plain one, before the one
    with the archive); docs/operations.md gives the same commands."""
    found = COMMAND.findall((ROOT / "README.md").read_text())
    assert found, "README.md gives no `pip install ./clients/python …` of the server"
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert all(f"pip install {args}" in operations for args in found), found
    return str(found[0])


def _uv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UV, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def install(venv: Path) -> Path:
    """A fresh venv with the documented command installed in it; its python."""
    made = _uv("venv", "--python", sys.executable, str(venv))
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    # --no-sources: as pip does, ignore the [tool.uv.sources] of the checkout's uv workspace (which
    # would install the client editable, from the checkout, instead of from ./clients/python).
    args = ["pip", "install", "--no-sources", "--python", str(py), *shlex.split(documented_command())]
    done = _uv(args[0], args[1], "--offline", *args[2:])
    if done.returncode != 0:  # the cache lacks some package (or its index page): once from the index
        done = _uv(*args)
        if done.returncode != 0 and "Failed to fetch" in done.stderr:
            pytest.skip(f"no network and a cold uv cache: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr
    return py


def test_the_documented_install_runs_a_batch(redis_url: str, tmp_path: Path) -> None:
    if not Path(UV).exists():
        pytest.skip("uv is not in the venv (bin/dev installs it)")
    py = install(tmp_path / "venv")
    bin_dir = py.parent
    home = tmp_path / "home"  # nothing of the checkout on the path: cwd elsewhere, no PYTHONPATH
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": "", "REDIS_URL": redis_url, "AGENTMILL_CLI_STATE_DIR": str(home)}
    where = subprocess.run(
        [str(py), "-c", "import agentmill_client, producer, shared, worker as w; print(w.__file__, agentmill_client.__file__)"],
        capture_output=True, text=True, cwd=home, env=env, check=True,
    ).stdout  # fmt: skip
    assert str(ROOT) not in where and where.count(str(tmp_path / "venv")) == 2, where

    (home / "runs.jsonl").write_bytes(RUN)
    agentmill = str(bin_dir / "agentmill")  # the venv's console script, as a user runs it
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([agentmill, "worker"], cwd=home, env=env, stdout=out, stderr=out)
    try:
        submitted = subprocess.run(
            [agentmill, "submit", "runs.jsonl", "--wait"], capture_output=True, text=True, cwd=home, env=env, timeout=90
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr + log.read_text()
        assert "(1 completed)" in submitted.stderr, submitted.stderr
        (run_id,) = [line for line in submitted.stdout.split() if line.startswith("run_")]
        status = subprocess.run(
            [agentmill, "status", run_id], capture_output=True, text=True, cwd=home, env=env, timeout=60
        )  # fmt: skip
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, log.read_text()
    assert status.returncode == 0, status.stderr
    assert "completed" in status.stdout and "installed and answering" in status.stdout, status.stdout
