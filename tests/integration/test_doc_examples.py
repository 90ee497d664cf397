"""The documents' examples run as a reader would paste them, against a real pool: a redis-server on
a free port, ``agentmill api`` and ``agentmill worker`` in processes of their own, started once for
the module with the settings README.md tells a reader to set (``REDIS_URL``, ``AGENTMILL_API_TOKENS``).

Each document's shell examples run in order in one bash (``set -euo pipefail``; an example that
fails names its line in the document), its Python examples in order in one Python process (the
traceback names the document's line), both in a fresh directory. Which blocks are examples and how
one is marked skipped: tests/support/doc_examples.py.

What the test changes in what a reader would run, all of it here: ``Pool.substitutions`` in the
code (the API's address) and ``Pool.environment`` (where the pool's Redis is, where ``agentmill
submit`` keeps its journals, and curl's ``--fail-with-body``, so an error answer fails the example
instead of being printed). Besides the venv's commands, the examples use curl, jq and redis-cli.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.doc_examples import DOCUMENTS, ROOT, examples, script
from tests.support.ports import free_port
from tests.support.procs import WorkerProc, wait_until
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("doc_examples")]

TOKENS = "tok-a=tenant-a"  # README.md: "AGENTMILL_API_TOKENS='tok-a=tenant-a'"
ID_SECRET = "doc-examples-id-secret"  # README.md: AGENTMILL_ID_SECRET, one value for every process
DOCUMENTED_API = "127.0.0.1:8000"  # where `agentmill api` listens by default
TIMEOUT_S = 60  # a document's examples of one language, together
# Line 1 of each program. The shell traces each command with its line in the document (the last
# one traced is the one that hangs, if one does); Python dumps its stack if it has not ended in time.
SHELL_PRELUDE = (
    "set -euo pipefail; PS4='+ {doc}:$LINENO: '; set -x; "
    "trap 'echo \"{doc}:$LINENO: this example failed (exit $?)\" >&2' ERR"
)
PYTHON_PRELUDE = f"import faulthandler; faulthandler.dump_traceback_later({TIMEOUT_S - 5})"


@dataclass
class Pool:
    redis_url: str
    api: str  # host:port
    logs: Path

    def substitutions(self) -> dict[str, str]:
        return {DOCUMENTED_API: self.api}

    def environment(self, home: Path) -> dict[str, str]:
        (home / ".curlrc").write_text("fail-with-body\n")
        bindir = str(Path(sys.executable).parent)  # `agentmill`, `python` as the venv has them
        return {
            **os.environ,
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "REDIS_URL": self.redis_url,
            "AGENTMILL_CLI_STATE_DIR": str(home / "state"),
            "CURL_HOME": str(home),
        }

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}:\n" + p.read_text()[-3000:] for p in sorted(self.logs.glob("*.log")))


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    logs = tmp_path_factory.mktemp("doc-pool")
    redis = RedisServer()
    redis.start()
    port = free_port()
    env = {"AGENTMILL_API_TOKENS": TOKENS, "AGENTMILL_ID_SECRET": ID_SECRET}  # as README exports them
    api_env = {**env, "AGENTMILL_API_PORT": str(port)}
    api = WorkerProc(redis.url, env=api_env, log=logs / "api.log", argv=["-m", "app.cli", "api"])
    worker = WorkerProc(redis.url, env=env, log=logs / "worker.log", argv=["-m", "app.cli", "worker"])
    try:
        api.start()
        worker.start()
        p = Pool(redis.url, f"127.0.0.1:{port}", logs)
        assert wait_until(lambda: _ready(p.api) or not api.alive, 60) and api.alive, p.log_tail()
        yield p
    finally:
        worker.stop(timeout=20)
        api.stop(timeout=20)
        redis.close()


def _ready(api: str) -> bool:
    try:
        return httpx.get(f"http://{api}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _run(argv: list[str], program: str, cwd: Path, env: dict[str, str]) -> tuple[int | None, str, str]:
    """Exit code (None: killed after ``TIMEOUT_S``), stdout and stderr of ``argv`` reading ``program``.
    Its own process group, so a command an example left waiting goes with it."""
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    ) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(program, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return None, out, err
        return proc.returncode, out, err


CASES = [
    pytest.param(doc, language, id=f"{doc.relative_to(ROOT)}:{language}")
    for doc in DOCUMENTS
    for language in ("sh", "python")
    if any(e.language == language and e.skip is None for e in examples(doc.read_text()))
]


@pytest.mark.parametrize(("doc", "language"), CASES)
def test_the_documents_examples_run(pool: Pool, doc: Path, language: str, tmp_path: Path) -> None:
    found = examples(doc.read_text(), str(doc.relative_to(ROOT)))
    name = str(doc.relative_to(ROOT))
    prelude = (SHELL_PRELUDE if language == "sh" else PYTHON_PRELUDE).format(doc=name)
    program = script(found, language, prelude=prelude)
    for documented, here in pool.substitutions().items():
        program = program.replace(documented, here)
    env = pool.environment(tmp_path)
    if language == "sh":
        code, out, err = _run(["bash", "-s"], program, tmp_path, env)
    else:  # compiled under the document's own path, so a traceback shows the document's line
        runner = (
            f"import sys; exec(compile(sys.stdin.read(), {str(doc)!r}, 'exec'), {{'__name__': '__main__'}})"
        )
        code, out, err = _run([sys.executable, "-c", runner], program, tmp_path, env)
    assert code == 0, (
        f"{name}: a {language} example "
        + (f"failed (exit {code})" if code is not None else f"had not ended after {TIMEOUT_S} s")
        + f"\n--- stdout:\n{out[-4000:]}\n--- stderr:\n{err[-4000:]}\n{pool.log_tail()}"
    )
