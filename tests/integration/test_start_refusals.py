"""Configuration that could only fail later is refused at start-up: the real entry points, run as
a user runs them, say so in one line on stderr naming the setting, and exit 2 before connecting
anywhere (REDIS_URL points at a port nothing listens on), with no traceback.

Each is started as ``python -m …`` through the fork server (tests/support/forkserver.py: the module
run as ``__main__`` in a child forked from a process that imported it, with the test's environment
and descriptors), not a fresh interpreter: the checks run at start, not at import, so the child
meets them as a fresh process would, without paying about 2 s of CPU for the imports each time.
The refusals of a missing driver set PYTHONPATH, so they start in a fresh interpreter anyway."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from tests.support import forkserver
from tests.support.procs import ROOT

WORKER = ["-m", "app.worker"]
AGENTMILL_WORKER = ["-m", "app.cli", "worker"]
API = ["-m", "app.cli", "api"]
ARCHIVER = ["-m", "app.cli", "archiver"]
STATUS = ["-m", "app.cli", "status", "r-1"]
NOWHERE = "redis://127.0.0.1:1/0"

# A Python path on which asyncpg cannot be imported, as where the `archive` extra is not installed.
BLOCK_ASYNCPG = """
import sys

class _NoAsyncpg:
    def find_spec(self, name, path=None, target=None):
        if name == "asyncpg" or name.startswith("asyncpg."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoAsyncpg())
"""


def refused(argv: list[str], env: dict[str, str]) -> str:
    """The one line ``argv`` says on stderr as it exits 2."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMILL_") and k != "REDIS_URL"}
    full |= {"REDIS_URL": NOWHERE, "AGENTMILL_WORKER_METRICS_PORT": "-1", **env}
    done = forkserver.run(argv, cwd=ROOT, env=full, timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Traceback" not in out, out
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, out
    return lines[0]


def profiles(tmp_path: Path, *profile: dict[str, object]) -> str:
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": list(profile)}))
    return str(path)


@pytest.mark.parametrize("argv", [WORKER, AGENTMILL_WORKER, API, ARCHIVER, STATUS])
def test_a_redis_url_without_a_scheme(argv: list[str]) -> None:
    line = refused(argv, {"REDIS_URL": "localhost:6379", "AGENTMILL_ARCHIVE_URL": "postgresql://x@h/db"})
    assert "REDIS_URL: must be a URL starting with redis://" in line and "'localhost:6379'" in line


def test_the_password_of_a_refused_redis_url_is_not_shown() -> None:
    line = refused(WORKER, {"REDIS_URL": ":hunter2@localhost:6379"})
    assert "hunter2" not in line and "':***@localhost:6379'" in line


@pytest.mark.parametrize("argv", [WORKER, API])
def test_an_unknown_tool(tmp_path: Path, argv: list[str]) -> None:
    path = profiles(tmp_path, {"name": "maths", "tools": ["calculatr"]})
    line = refused(argv, {"AGENTMILL_PROFILES": path})
    assert f"AGENTMILL_PROFILES={path}: profile 'maths': tools: no built-in tool named 'calculatr'" in line
    assert "did you mean 'calculator'?" in line and "built-in tools: calculator, echo" in line


@pytest.mark.parametrize(
    ("argv", "provider", "missing"),
    [
        (WORKER, {"model": "m"}, "baseUrl"),
        (WORKER, {"baseUrl": "http://127.0.0.1:1/v1"}, "model"),
        (API, {}, "baseUrl and model"),
    ],
)
def test_an_openai_provider_without_its_endpoint_or_model(
    tmp_path: Path, argv: list[str], provider: dict[str, str], missing: str
) -> None:
    path = profiles(tmp_path, {"name": "gpt", "provider": {"kind": "openai", **provider}})
    line = refused(argv, {"AGENTMILL_PROFILES": path})
    assert line.endswith(f"profile 'gpt': provider: an openai provider needs {missing}"), line


@pytest.mark.parametrize("argv", [WORKER, AGENTMILL_WORKER])
def test_a_worker_whose_profile_names_an_unset_key(tmp_path: Path, argv: list[str]) -> None:
    path = profiles(tmp_path, {"name": "gpt", "provider": {"kind": "openai", "baseUrl": "http://127.0.0.1:1/v1",
                               "model": "m", "apiKeyEnv": "AGENTMILL_TEST_UNSET_KEY"}})  # fmt: skip
    line = refused(argv, {"AGENTMILL_PROFILES": path})
    assert "AGENTMILL_PROFILES: profile 'gpt': provider.apiKeyEnv names AGENTMILL_TEST_UNSET_KEY" in line
    assert "not set" in line


@pytest.mark.parametrize("argv", [WORKER, API, ARCHIVER, STATUS])
def test_an_archive_without_its_driver(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_ASYNCPG)
    env = {"AGENTMILL_ARCHIVE_URL": "postgresql://u@127.0.0.1:1/db", "PYTHONPATH": str(tmp_path)}
    line = refused(argv, env)
    assert line.split(": ", 1)[1].startswith(
        "AGENTMILL_ARCHIVE_URL is set but the archive's driver cannot be"
    )
    assert "No module named 'asyncpg'" in line and "agentmill[archive]" in line
