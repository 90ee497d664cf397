"""A script call is framed and sent on one floor (shared.script_sending), and the walk of a
submission, from Submitter.submit to submit_one, takes nothing from shared/scripts.py but the
scripts themselves (``Scripts``): no reply decoding, no framing."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path

import fakeredis.aioredis

from shared import keys
from shared.script_sending import Framing
from shared.scripts import Scripts
from shared.settings import Settings

# The modules a submission walks through: prepare, place, admit, send (one run or a batch's chunks),
# and a sub-agent's child, which is created the same way.
WALK = (
    "producer.submitter", "producer.prepared", "producer.placement", "producer.admission",
    "producer.submission", "producer.chunk_sender", "producer.agents", "producer.agent_choice",
    "shared.stored_input", "shared.children", "shared.partitions",
)  # fmt: skip


ROOT = Path(__file__).resolve().parents[2]


def _tree(module: str) -> ast.Module:
    path = ROOT / Path(*module.split("."))
    return ast.parse((path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text())


def _modules(*packages: str) -> list[str]:
    return [
        ".".join(f.relative_to(ROOT).with_suffix("").parts)
        for p in packages
        for f in (ROOT / p).rglob("*.py")
    ]


def test_the_submission_walk_takes_only_the_scripts_from_shared_scripts() -> None:
    _only_scripts_from_shared_scripts(WALK, lambda taken: taken <= {"Scripts"})


def test_the_producer_shared_code_and_the_app_frame_on_the_floor_too() -> None:
    """(worker/ still frames through ``Scripts.frame``, which hands the call to its framing.)"""
    outside = {"shared.scripts", "shared.script_sending"}
    modules = [m for m in _modules("producer", "shared", "app") if m not in outside]
    _only_scripts_from_shared_scripts(modules, lambda taken: not taken & {"text", "CONTEXT_EXTRA"})


def _only_scripts_from_shared_scripts(modules: Sequence[str], allowed: Callable[[set[str]], bool]) -> None:
    for module in modules:
        tree = _tree(module)
        taken = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "shared.scripts"
                 for a in n.names}  # fmt: skip
        assert allowed(taken), (module, taken)
        framed_by_scripts = [
            n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr in ("frame", "context")
            and isinstance(n.value, ast.Attribute | ast.Name)
            and (n.value.attr if isinstance(n.value, ast.Attribute) else n.value.id) == "scripts"
        ]  # fmt: skip
        assert framed_by_scripts == [], (module, framed_by_scripts)


def test_no_module_sends_through_a_producer_routing_floor() -> None:
    try:
        importlib.import_module("producer.routing")
    except ModuleNotFoundError:
        return
    raise AssertionError(
        "producer.routing is back: script calls are framed and sent in shared.script_sending"
    )


def test_a_deployments_scripts_frame_with_its_settings() -> None:
    part = keys.Partition(1, 4)
    settings = Settings.model_construct(retention_s=1234, stream_maxlen=77)
    scripts = Scripts(fakeredis.aioredis.FakeRedis(), settings)
    own_keys, args = scripts.framing.frame(part, ["k1"], ["a1", 2])
    assert (own_keys, args) == Framing(settings).frame(part, ["k1"], ["a1", 2])
    assert own_keys[0] == "k1" and own_keys[1:] == [part.queue, part.live, part.awaiting, part.workers,
                                                     part.webhooks, part.scheduled, part.depth, part.wake]  # fmt: skip
    assert args[:-1] == ["a1", 2] and args[-1].startswith(part.context)  # the context last
    assert f"{keys.SEP}1234{keys.SEP}" in args[-1] and f"{keys.SEP}77{keys.SEP}" in args[-1]
    assert scripts.framing.call(part, ["k1"], ["a1", 2]) == (part, own_keys, args)
    assert Framing().context(part) != scripts.framing.context(part)  # the defaults' retention differs
