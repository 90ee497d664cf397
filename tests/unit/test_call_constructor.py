"""Every declared call is built by an ``__init__`` written from its fields (shared.construct):
it must build what the dataclass's own ``__init__`` builds, from the same arguments, and refuse what
it refuses; an object built so is as frozen, equal, hashable and printed as before."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from shared.calls import CALLS, ScriptCall
from shared.calls.steps import Commit
from shared.construct import DATACLASS_INIT, init_source, written_init

_UNSET = object()


@dataclass(frozen=True, slots=True)
class _Factories(ScriptCall):
    """What no declared call uses yet, but the written __init__ must do as the dataclass does."""

    SCRIPT = "test_factories"
    KEY_NAMES = ()

    a: str
    items: list[str] = field(default_factory=list)
    n: int = 3
    derived: str = field(default="", init=False)
    seen: dict[str, int] = field(default_factory=dict, init=False)
    flag: bool = field(default=False, kw_only=True)
    need: str = field(kw_only=True, default="k")

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", f"{self.a}:{self.n}:{len(self.items)}")


@dataclass(frozen=True, slots=True)
class _WithInitVar(ScriptCall):
    SCRIPT = "test_initvar"
    KEY_NAMES = ()

    a: str
    extra: InitVar[int] = 0
    b: str = ""

    def __post_init__(self, extra: int) -> None:
        object.__setattr__(self, "b", f"{self.a}{extra}")


def _built(cls: type, init: Callable[..., None], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    """The object ``init`` builds from the arguments, or the type of what it raises."""
    obj = object.__new__(cls)
    try:
        init(obj, *args, **kw)
    except Exception as e:  # what is raised is what is compared
        return type(e)
    return obj


def _state(obj: Any) -> Any:
    if isinstance(obj, type):
        return obj
    values = tuple(getattr(obj, f.name, _UNSET) for f in dataclasses.fields(obj))
    return values, _or_raised(repr, obj), _or_raised(hash, obj)


def _or_raised(fn: Callable[[Any], object], obj: Any) -> object:
    try:
        return fn(obj)
    except Exception as e:  # an unset field (repr), a list field (hash)
        return type(e)


def _argument_sets(cls: type) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Arguments to build ``cls`` from: only what is required, by keyword and by position; every
    parameter set, by keyword and by position; and ones the dataclass refuses."""
    params = list(inspect.signature(cls).parameters.values())
    value = {p.name: (f"v{i}", i) for i, p in enumerate(params)}
    required = [p for p in params if p.default is inspect.Parameter.empty]
    positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    sets: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {p.name: value[p.name] for p in required}),
        (tuple(value[p.name] for p in positional if p in required), {}),
        ((), {p.name: value[p.name] for p in params}),
        (
            tuple(value[p.name] for p in positional),
            {p.name: value[p.name] for p in params if p not in positional},
        ),
        ((), {}),  # a required one missing (when it has one)
        ((), {**{p.name: value[p.name] for p in required}, "no_such_field": 1}),
        (tuple(range(len(positional) + 1)), {}),  # one too many
    ]
    if positional:
        first = positional[0].name
        sets.append(((value[first],), {p.name: value[p.name] for p in params}))  # twice
    return sets


def _differences(cls: type, init: Callable[..., None]) -> list[str]:
    """Where ``init`` builds (or refuses) otherwise than the dataclass's own ``__init__``."""
    own = DATACLASS_INIT[cls]
    out = []
    for args, kw in _argument_sets(cls):
        got, want = _state(_built(cls, init, args, kw)), _state(_built(cls, own, args, kw))
        if got != want:
            out.append(f"{cls.__name__}(*{args}, **{kw}): {got} != {want}")
    return out


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_declared_call_is_built_by_its_written_init_as_the_dataclass_builds_it(name: str) -> None:
    cls = CALLS[name]
    assert cls in DATACLASS_INIT, f"{cls.__name__} kept the dataclass's __init__"
    assert cls.__init__ is not DATACLASS_INIT[cls]
    assert inspect.signature(cls.__init__) == inspect.signature(DATACLASS_INIT[cls])
    assert _differences(cls, cls.__init__) == [], init_source(cls)


def test_factories_defaults_init_false_kw_only_and_post_init_are_as_the_dataclass_does_them() -> None:
    assert _Factories in DATACLASS_INIT
    assert _differences(_Factories, _Factories.__init__) == []
    one, two = _Factories("x"), _Factories("x")
    assert one.items == [] and one.items is not two.items  # a new list each
    assert one.seen == {} and one.seen is not two.seen
    assert one.derived == "x:3:0"
    assert _Factories("y", ["p"], 5, flag=True).derived == "y:5:1"
    with pytest.raises(TypeError):
        _Factories("y", [], 1, True)  # type: ignore[misc]  # flag is keyword-only


def test_a_call_with_an_init_var_keeps_the_dataclass_init() -> None:
    assert _WithInitVar not in DATACLASS_INIT
    assert _WithInitVar("a", 4).b == "a4"


def test_a_built_call_is_frozen_equal_hashable_and_printed_as_before() -> None:
    call = Commit(1, 2, "lease", "run", status="done", sections=(b"e", 1), aux=b"{}")
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.epoch = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del call.epoch  # type: ignore[misc]
    with pytest.raises(AttributeError):
        object.__setattr__(call, "not_a_field", 1)  # slots: no __dict__
    same = _built(Commit, DATACLASS_INIT[Commit], (1, 2, "lease", "run"), {"status": "done",
                  "sections": (b"e", 1), "aux": b"{}"})  # fmt: skip
    assert call == same and hash(call) == hash(same) and repr(call) == repr(same)
    assert dataclasses.replace(call, epoch=5) == dataclasses.replace(same, epoch=5)


def _set(cls: type, name: str, value: str = "") -> str:
    """The written ``__init__``'s line that sets field ``name`` (to ``value``: its parameter)."""
    i = [f.name for f in dataclasses.fields(cls)].index(name)
    return f"_s{i}(self, {value or name})"


def _swapped(cls: type) -> str:
    return (
        init_source(cls)
        .replace("_s0(self, ", "_sX(self, ")
        .replace("_s1(self, ", "_s0(self, ")
        .replace("_sX(self, ", "_s1(self, ")
    )


@pytest.mark.parametrize(
    ("cls", "broken"),
    [
        (Commit, _swapped),  # two fields set from each other's parameter
        (Commit, lambda c: init_source(c).replace(f"    {_set(c, 'ckpt')}\n", "")),  # a field left unset
        (Commit, lambda c: init_source(c).replace(_set(c, "iterations"), _set(c, "iterations", "None"))),
        (_Factories, lambda c: init_source(c).replace("    self.__post_init__()\n", "")),
        (_Factories, lambda c: init_source(c).replace("_f1() if items is _d1 else items", "items")),
    ],
)
def test_a_broken_written_init_is_caught(cls: type, broken: Callable[[type], str]) -> None:
    assert broken(cls) != init_source(cls)
    init = written_init(cls, broken)
    assert init is not None
    assert _differences(cls, init) != []


def test_a_written_init_whose_signature_differs_is_not_installed() -> None:
    assert written_init(Commit, lambda c: init_source(c).replace("status=_d4", "status=_d5")) is None


def _worker_values() -> list[type]:
    """The run's values built at every step with a written ``__init__`` (shared.construct.with_written_init)."""
    import worker.core.acquisition
    import worker.core.commit_step
    import worker.machine
    import worker.runner.effect
    import worker.runner.parking  # noqa: F401

    return sorted(
        (c for c in DATACLASS_INIT if c.__module__.startswith("worker.")), key=lambda c: c.__qualname__
    )


def test_the_runs_values_have_written_inits() -> None:
    names = {c.__name__ for c in _worker_values()}
    assert {
        "Started",
        "ModelReplied",
        "Emit",
        "CallModel",
        "ModelRequest",
        "Finish",
        "Acquired",
        "CommitStep",
    } <= names


@pytest.mark.parametrize("cls", _worker_values(), ids=lambda c: c.__qualname__)
def test_each_of_the_runs_values_is_built_by_its_written_init_as_the_dataclass_builds_it(cls: type) -> None:
    assert cls.__init__ is not DATACLASS_INIT[cls]
    assert inspect.signature(cls.__init__) == inspect.signature(DATACLASS_INIT[cls])
    assert _differences(cls, cls.__init__) == [], init_source(cls)
