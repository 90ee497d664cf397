"""The dev harness (tests/support/redis_server.py, redis_cluster.py, cluster_nodes.py: starting,
killing and failing over redis-server processes) stays out of what workers, the API and the client
import: no module of shared/, producer/, worker/, app/ or clients/ imports from tests/ or bench/, and the
only one that starts a process is the demo's own redis-server (app/cli/embedded_redis.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ("shared", "producer", "worker", "app", "clients")
DEV_ONLY = ("tests", "bench")
# Runtime modules allowed to start processes, each with its reason.
STARTS_PROCESSES = {"app.cli.embedded_redis": "the demo's own redis-server"}


def _module(path: Path) -> str:
    """The dotted name of ``path`` below ROOT (clients' modules keep their folder: clients.python.…)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports (``from a import b`` counts as ``a`` and ``a.b``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _runtime_modules() -> dict[str, set[str]]:
    files = [p for pkg in RUNTIME for p in (ROOT / pkg).rglob("*.py") if ".venv" not in p.parts]
    assert len(files) > 100  # the walk found the packages
    return {_module(p): _imported(p) for p in files}


def _is_under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == r or name.startswith(f"{r}.") for r in roots)


def test_no_runtime_module_imports_the_tests_or_the_bench() -> None:
    bad = {m: sorted(n for n in names if _is_under(n, DEV_ONLY)) for m, names in _runtime_modules().items()}
    assert not {m: names for m, names in bad.items() if names}


def test_only_the_demos_redis_starts_a_process() -> None:
    modules = _runtime_modules()
    starters = {m for m, names in modules.items() if any(_is_under(n, ("subprocess",)) for n in names)}
    assert starters == set(STARTS_PROCESSES)
