"""A frozen slotted dataclass's constructor, written from its fields once per class as dataclasses
writes ``__init__``, but setting each field through its slot's descriptor: a frozen dataclass's
``__init__`` sets every field with ``object.__setattr__`` (a look-up along the class's MRO each), and
a step's commit builds a call of some forty fields twice; a run's every step builds its events,
commands and commit steps. The dataclass stays the declaration (its signature is the one mypy and
``inspect`` read); the written ``__init__`` takes the same parameters, defaults and default
factories, calls ``__post_init__`` if the class has one, and leaves the object as frozen. A class
whose fields this does not cover (an ``InitVar``, a field without a slot) keeps the dataclass's own
``__init__``. Declared script calls get it by their base (shared.calls.base); other values by
``with_written_init``. No import beyond the standard library: the machine and the core use it."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from types import MemberDescriptorType
from typing import Any, TypeVar

__all__ = ["DATACLASS_INIT", "init_source", "install_init", "with_written_init", "written_init"]

T = TypeVar("T", bound=type)

# Each class given a written __init__ -> the dataclass's own (the reference the tests compare with).
DATACLASS_INIT: dict[type, Callable[..., None]] = {}


def _slots(cls: type) -> list[MemberDescriptorType] | None:
    """Each field's slot (its member descriptor), in the fields' order; None when one has none."""
    out = []
    for f in dataclasses.fields(cls):
        d = next((vars(k)[f.name] for k in cls.__mro__ if f.name in vars(k)), None)
        if not isinstance(d, MemberDescriptorType):
            return None
        out.append(d)
    return out


def init_source(cls: type) -> str:
    """The source of ``cls``'s ``__init__``: globals ``_s<i>`` set field i (its slot's ``__set__``),
    ``_d<i>`` is its parameter's default (for a field with a default factory, the dataclass's marker
    of a parameter left to it) and ``_f<i>`` its default factory."""
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for i, f in enumerate(dataclasses.fields(cls)):
        factory = f.default_factory is not dataclasses.MISSING
        if f.init:
            default = factory or f.default is not dataclasses.MISSING
            (keyword if f.kw_only else positional).append(f"{f.name}=_d{i}" if default else f.name)
            value = f"_f{i}() if {f.name} is _d{i} else {f.name}" if factory else f.name
        elif factory:
            value = f"_f{i}()"
        elif f.default is not dataclasses.MISSING:
            value = f"_d{i}"
        else:
            continue  # init=False and no default: left unset, as the dataclass leaves it
        body.append(f"    _s{i}(self, {value})")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    return f"def __init__({params}):\n" + "\n".join(body or ["    pass"]) + "\n"


def written_init(cls: type, source: Callable[[type], str] = init_source) -> Callable[..., None] | None:
    """``cls``'s ``__init__`` written from ``source``; None when a field has no slot or the written
    signature would differ from the dataclass's (an ``InitVar``, passed to ``__post_init__``)."""
    own = DATACLASS_INIT.get(cls, cls.__dict__["__init__"])
    if (slots := _slots(cls)) is None:
        return None
    params = inspect.signature(own).parameters
    ns: dict[str, Any] = {}
    for i, (f, slot) in enumerate(zip(dataclasses.fields(cls), slots, strict=True)):
        ns[f"_d{i}"] = params[f.name].default if f.name in params else f.default
        ns[f"_f{i}"] = f.default_factory
        ns[f"_s{i}"] = slot.__set__
    exec(compile(source(cls), f"<{cls.__name__}.__init__>", "exec"), ns)
    written: Callable[..., None] = ns["__init__"]
    for attr in ("__qualname__", "__module__", "__annotations__", "__doc__"):
        setattr(written, attr, getattr(own, attr))
    return written if inspect.signature(written) == inspect.signature(own) else None


def install_init(cls: type) -> bool:
    """Give ``cls`` (a dataclass with slots, just made) its written ``__init__``, keeping the
    dataclass's own in ``DATACLASS_INIT``; False (the dataclass's stays) when none is written."""
    if (written := written_init(cls)) is None:
        return False
    DATACLASS_INIT[cls] = cls.__dict__["__init__"]
    type.__setattr__(cls, "__init__", written)
    return True


def with_written_init(cls: T) -> T:
    """Class decorator, over ``@dataclass(frozen=True, slots=True)``: ``cls`` with its written
    ``__init__`` (``install_init``), for the values built at every step of a run."""
    install_init(cls)
    return cls
