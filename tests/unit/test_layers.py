"""The worker's layers: ports do not depend on their users, effects do not hold the driver, and no
module of shared/ or worker/ imports itself back (annotations only, under TYPE_CHECKING, count too)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "worker")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports: ``from a.b import c`` is ``a.b.c`` when that is a module
    (a package's own modules, imported from it, do not count as importing the package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out |= subs if len(subs) == len(node.names) else {*subs, node.module}
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    known = set(files)
    return {m: _imports(p, known) - {m} for m, p in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*path[path.index(n) :], n]
            if n not in state and (found := visit(n)) is not None:
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def test_shared_and_worker_have_no_import_cycle() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_ports_import_none_of_their_users() -> None:
    users = (
        "worker.runner",
        "worker.deps",
        "worker.memory_store",
        "worker.redis_store",
        "worker.tools.registry",
    )
    imported = _graph()["worker.ports"]
    assert not {m for m in imported if m.startswith(users)}, imported


def test_effects_never_import_the_driver() -> None:
    # Every module of the runner but the driver: they get an EffectContext, never the RunDriver.
    graph = _graph()
    others = [m for m in graph if m.startswith("worker.runner.") and m != "worker.runner.driver"]
    assert "worker.runner.effect" in others
    for m in others:
        assert not {"worker.runner.driver", "worker.runner"} & graph[m], m  # the package re-exports it
