"""The layers: the floors (``agentmill_client`` and ``shared`` under both sides, ``producer`` and
``worker`` beside each other, ``app``, the process roots, above them), ports that do not depend on
their users, effects that do not hold the driver, and no module of the product (app/, shared/,
worker/, producer/ and the client package, agentmill_client) importing itself back. An import under ``if TYPE_CHECKING:`` counts like any other: a type-only import still ties two
modules together (and is one refactor away from a runtime cycle)."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Each package of the product: its import name and its folder.
PACKAGES = {
    "shared": ROOT / "shared",
    "worker": ROOT / "worker",
    "producer": ROOT / "producer",
    "app": ROOT / "app",
    "agentmill_client": ROOT / "clients" / "python" / "agentmill_client",
}


def _module(package: str, folder: Path, path: Path) -> str:
    parts = (package, *path.relative_to(folder).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports, anywhere in it (in functions, under TYPE_CHECKING):
    ``from a.b import c`` is ``a.b.c`` when that is a module (a package's own modules, imported
    from it, do not count as importing the package); relative imports are resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            if base not in known:
                continue
            subs = {f"{base}.{a.name}" for a in node.names} & known
            out |= subs if len(subs) == len(node.names) else {*subs, base}
    return out


def _graph(packages: dict[str, Path] = PACKAGES) -> dict[str, set[str]]:
    files = {_module(pkg, folder, p): p for pkg, folder in packages.items() for p in folder.rglob("*.py")}
    known = set(files)
    return {m: _imports(m, p, known) - {m} for m, p in files.items()}


@functools.cache
def _project() -> dict[str, set[str]]:
    """The project's graph, parsed once a process (about 1.4 s of CPU) for the tests that read it."""
    return _graph()


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


def test_the_product_has_no_import_cycle() -> None:
    graph = _project()
    assert {"producer.service", "agentmill_client.models", "worker.machine.table"} <= set(graph)
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


# What each package may import of the others (the client package and the standard library aside).
MAY_IMPORT = {
    "agentmill_client": set(),
    "shared": {"agentmill_client"},
    "producer": {"agentmill_client", "shared"},
    "worker": {"agentmill_client", "shared"},
    "app": {"agentmill_client", "shared", "producer", "worker"},
}


def test_no_import_goes_up_or_sideways() -> None:
    """``worker`` imports nothing of ``producer`` nor ``producer`` of ``worker``: what needs both (a
    worker process that fires schedules, an API that forks runs from the machine's state) is
    composed in ``app``."""
    graph = _project()
    crossings = sorted(
        f"{m} imports {n}"
        for m, ns in graph.items()
        for n in ns
        if n.split(".")[0] not in MAY_IMPORT[m.split(".")[0]] | {m.split(".")[0]}
    )
    assert crossings == []


def test_a_crossing_is_seen_in_a_function_and_under_type_checking(tmp_path: Path) -> None:
    for pkg in ("low", "high"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "high" / "h.py").write_text("")
    (tmp_path / "low" / "a.py").write_text("def f():\n    from high import h\n")
    (tmp_path / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import high.h\n"
    )
    graph = _graph({"low": tmp_path / "low", "high": tmp_path / "high"})
    assert graph["low.a"] == {"high.h"} and graph["low.b"] == {"high.h"}


def test_the_process_roots_are_in_app() -> None:
    """The entry points: the command, a worker process (``python -m app.worker``), its supervisor,
    the API's factory."""
    for module in ("cli/__init__.py", "worker.py", "supervisor.py", "api.py"):
        assert (ROOT / "app" / module).is_file(), module
    assert not (ROOT / "worker" / "__main__.py").exists()
    assert not (ROOT / "producer" / "cli").exists()


def test_a_cycle_made_only_of_type_checking_imports_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .. import a\n"
    )
    assert _cycle(_graph({"pkg": pkg})) == ["pkg.a", "pkg.sub.b", "pkg.a"]
    (pkg / "sub" / "b.py").write_text("import typing\n")
    assert _cycle(_graph({"pkg": pkg})) is None


def test_the_ports_import_none_of_their_users() -> None:
    """Protocols only (the values they exchange live in worker/core): no implementation (adapters, the
    process, the runner, the tool registry), and of telemetry only the observer's protocol."""
    users = (
        "worker.runner",
        "worker.process",
        "worker.adapters",
        "worker.telemetry",
        "worker.tools.registry",
    )
    imported = _project()["worker.ports"]
    assert not {m for m in imported if m.startswith(users)} - {"worker.telemetry.observer"}, imported
    tree = ast.parse((ROOT / "worker" / "ports.py").read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert len(classes) > 10
    for c in classes:
        bases = {b.id if isinstance(b, ast.Name) else "" for b in c.bases}
        assert bases == {"Protocol"}, f"ports.py: {c.name} is not a protocol: give it a module named for it"


# worker/'s wings: the pure core beside the machine, the runner between them and the world, the
# adapters (the ports' implementations), telemetry, and the process that composes them; economy: the
# economy lane's batchers and their Redis side (a side loop of the process, and a run's EconomyPort).
WINGS = ("core", "machine", "runner", "adapters", "telemetry", "process", "models", "tools", "economy")
IO_MODULES = {"asyncio", "socket", "redis", "httpx", "httpcore", "arq", "anyio", "time", "random", "os",
              "subprocess", "threading", "urllib", "requests", "aiohttp", "uuid", "datetime", "io", "pathlib",
              "select", "ssl", "signal", "prometheus_client", "opentelemetry"}  # fmt: skip


def test_worker_has_its_wings_and_no_loose_module_but_its_ports() -> None:
    worker = ROOT / "worker"
    assert sorted(p.name for p in worker.glob("*.py")) == ["__init__.py", "ports.py"]
    assert sorted(p.name for p in worker.iterdir() if p.is_dir() and (p / "__init__.py").is_file()) == sorted(
        WINGS
    )


def test_the_core_imports_only_the_core_the_machine_and_the_ports() -> None:
    graph = _project()
    core = sorted(m for m in graph if m.startswith("worker.core"))
    assert {"worker.core.config", "worker.core.policy", "worker.core.context"} <= set(core)
    allowed = ("worker.core", "worker.machine", "worker.ports", "shared", "agentmill_client")
    for m in core:
        assert all(n.startswith(allowed) for n in graph[m]), (m, graph[m])


def test_the_core_imports_nothing_that_does_io() -> None:
    """Like the machine (tests/unit/test_machine_properties.py): no I/O library named in the core,
    and importing the core pulls none in."""
    modules = sorted((ROOT / "worker" / "core").glob("*.py"))
    assert len(modules) > 8
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for name in names:
                assert name.split(".")[0] not in IO_MODULES, f"{path.name} imports {name}"
    pure = [f"worker.core.{p.stem}" for p in modules if p.stem != "__init__"]
    code = (
        f"import sys; import {', '.join(pure)}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'redis', 'httpx', 'arq', 'asyncio', 'anyio', 'uvloop'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_runner_reaches_failpoints_only_through_its_host() -> None:
    """The runner imports nothing of the process (failpoints included): its points are hit through
    ``Host.failpoints``, a port."""
    graph = _project()
    runner = [m for m in graph if m.startswith("worker.runner")]
    assert "worker.runner.driver" in runner
    for m in runner:
        assert not {n for n in graph[m] if n.startswith("worker.process") or "failpoints" in n}, m


def test_effects_never_import_the_driver() -> None:
    # Every module of the runner but the driver: they get an EffectContext, never the RunDriver.
    graph = _project()
    others = [m for m in graph if m.startswith("worker.runner.") and m != "worker.runner.driver"]
    assert "worker.runner.effect" in others
    for m in others:
        assert not {"worker.runner.driver", "worker.runner"} & graph[m], m  # the package re-exports it
