"""The client distribution as a service installs it: `agentmill-client` alone, in a fresh venv,
beside the service's own package named `shared`, submitting a batch to a real API (real Redis, a
real worker) and waiting for it, with the blocking and the async client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentmill_client import __version__
from tests.integration.api_support import api, settings
from tests.integration.helpers import running_worker

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
UV = str(Path(sys.executable).parent / "uv")
# What installing the client may bring: the client and what httpx, pydantic and orjson need.
ALLOWED = {
    "agentmill-client", "httpx", "httpcore", "h11", "anyio", "idna", "sniffio", "certifi",
    "pydantic", "pydantic-core", "annotated-types", "typing-extensions", "typing-inspection", "orjson",
}  # fmt: skip

SERVICE = """
import asyncio, json, sys
import shared                      # the service's own package, not agentmill's
from agentmill_client import AsyncClient, Client, RunInput, __version__

url = sys.argv[1]
runs = [RunInput(agent="scripted", input_messages=[{"role": "user", "content": f"item {i}"}],
                 runtime_hints={"script": [{"text": f"done {i}"}]}) for i in range(3)]
with Client(url, token="tok-a") as c:
    answer = c.create_batch(runs, batch_id="svc-batch")
    view = c.wait_batch(answer.batch_id, timeout=30)

async def again():
    async with AsyncClient(url, token="tok-a") as c:
        return [r.result.final_assistant_message.content for r in [await c.get(i.run_id) for i in answer.results]]

print(json.dumps({"own": shared.NAME, "version": __version__, "finished": view.finished,
                  "counts": view.counts, "texts": asyncio.run(again())}))
"""


def _uv(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UV, *args], capture_output=True, text=True, check=True, **kw)  # type: ignore[call-overload, no-any-return]


def _install(tmp_path: Path) -> tuple[str, Path, str]:
    """The client's wheel in a fresh venv, and the service's directory with its own `shared`."""
    wheels = tmp_path / "wheels"
    _uv("build", "--wheel", "--out-dir", str(wheels), str(ROOT / "clients" / "python"))
    (wheel,) = wheels.glob("agentmill_client-*.whl")
    venv = tmp_path / "venv"
    _uv("venv", "--python", sys.executable, str(venv))
    py = str(venv / "bin" / "python")
    try:  # from the local cache when it has the packages (CI's machine does): fast, no network
        _uv("pip", "install", "--offline", "--python", py, str(wheel))
    except subprocess.CalledProcessError:
        _uv("pip", "install", "--python", py, str(wheel))
    installed = {
        json_name["name"].lower().replace("_", "-")
        for json_name in json.loads(_uv("pip", "list", "--format", "json", "--python", py).stdout)
    }
    assert installed <= ALLOWED, installed - ALLOWED
    service = tmp_path / "service"
    (service / "shared").mkdir(parents=True)
    own = 'NAME = "the service\'s own shared"\n'
    (service / "shared" / "__init__.py").write_text(own)
    (service / "app.py").write_text(SERVICE)
    found = subprocess.run(
        [py, "-c", "import importlib.util as u; print([m for m in ('worker', 'producer', 'arq', 'redis') if u.find_spec(m)])"],
        capture_output=True, text=True, check=True, cwd=service,
    ).stdout.strip()  # fmt: skip
    assert found == "[]", found
    return py, service, own


async def test_a_service_installs_only_the_client(redis_url: str, tmp_path: Path) -> None:
    if not Path(UV).exists():
        pytest.skip("uv is not in the venv (bin/dev installs it)")
    py, service, own = await asyncio.to_thread(_install, tmp_path)
    async with api(settings(redis_url)) as base, running_worker(redis_url):
        proc = await asyncio.create_subprocess_exec(
            py, "app.py", base, cwd=service, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": ""},
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    got = json.loads(out)
    assert got["own"] == "the service's own shared" and got["version"] == __version__
    assert got["finished"] and got["counts"]["completed"] == 3
    assert got["texts"] == ["done 0", "done 1", "done 2"]
    assert (service / "shared" / "__init__.py").read_text() == own  # untouched
