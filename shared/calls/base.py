"""What every declared script call is: its script, the names of its own KEYS in order, its fields as
its ARGV in order (after the partition's context, which prelude.lua takes off), and its verdicts."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar

from shared.construct import install_init

__all__ = ["KEY_ONLY", "TAIL", "ScriptCall", "bind"]

_TOKEN = re.compile(r"\b(ARGN|ARG|V|KEY)\.([A-Z][A-Z0-9_]*)\b")


@dataclasses.dataclass(frozen=True, slots=True)
class ScriptCall:
    """A script's call. Subclasses set ``SCRIPT``, ``KEY_NAMES`` (its own KEYS, in order) and
    ``VERDICT`` (the first element of its reply); their fields, in order, are its ARGV. A last field
    typed ``tuple[...]`` is spread (the rest of ARGV); the Lua finds where it starts as ``ARGN.<FIELD>``.
    A field declared ``field(metadata=KEY_ONLY)`` is no argument: it names where the call's keys are
    (``keys``). Fields declared ``field(metadata=TAIL)`` (after the rest) are the call's tail: sent
    after the rest up to the last of them that differs from its default (see ``TAIL``)."""

    SCRIPT: ClassVar[str]
    KEY_NAMES: ClassVar[tuple[str, ...]]
    VERDICT: ClassVar[type[StrEnum] | None] = None  # None: a reply that is no verdict (a value)

    def __init_subclass__(cls) -> None:
        """A declared call (``@dataclass(frozen=True, slots=True)``) gets the ``__init__`` written
        by shared.construct: dataclasses makes a slotted class anew, with its fields and its
        ``__init__`` already in its namespace, and this hook runs for that class."""
        if "__slots__" in cls.__dict__ and "__dataclass_fields__" in cls.__dict__:
            install_init(cls)

    def keys(self, part: Any) -> list[str]:
        """The call's own KEYS on ``part`` (a shared.keys.Partition), in ``KEY_NAMES``' order."""
        raise NotImplementedError

    def argv(self) -> list[Any]:
        """The call's own arguments, in the script's order (None is sent as '', a rest spread)."""
        return (_ARGV.get(type(self)) or _argv_of(type(self)))(self)

    @classmethod
    def positions(cls) -> dict[str, str]:
        """``ARG.<FIELD>`` and ``KEY.<NAME>`` tokens -> the Lua expressions they stand for."""
        fs = _arguments(cls)
        assert all(not _is_rest(f) for f in fs[:-1]), f"{cls.__name__}: only its last field may be a rest"
        out = {f"ARG.{f.name.upper()}": f"ARGV[{i}]" for i, f in enumerate(fs, 1) if not _is_rest(f)}
        out |= {f"ARGN.{f.name.upper()}": str(i) for i, f in enumerate(fs, 1) if _is_rest(f)}
        tail = _tail(cls)
        assert all(not _is_rest(f) for f in tail[:-1]), (
            f"{cls.__name__}: only its tail's last field may be a rest"
        )
        for k, f in enumerate(tail, 1):
            out[f"ARGN.{f.name.upper()}"] = f"TAIL + {k}"  # where it is (sent when ARGV[that] is)
            if not _is_rest(f):
                out[f"ARG.{f.name.upper()}"] = f"(ARGV[TAIL + {k}] or '{_lua_default(f)}')"
        out |= {f"KEY.{n.upper()}": f"KEYS[{i}]" for i, n in enumerate(cls.KEY_NAMES, 1)}
        out |= {f"V.{v.name}": f"'{v.value}'" for v in cls.VERDICT or ()}
        return out

    @classmethod
    def verdict(cls, reply: Any) -> StrEnum:
        """The reply's verdict (the reply itself, or its first element) as the call's enum."""
        first = reply if isinstance(reply, _TEXT) else reply[0]
        assert cls.VERDICT is not None, f"{cls.__name__} answers no verdict"
        if (known := _verdicts(cls.VERDICT).get(first)) is not None:
            return known
        return cls.VERDICT(first.decode() if isinstance(first, bytes) else str(first))

    @classmethod
    def header(cls) -> str:
        """The Lua header describing the call, generated (docs of the slots, never written by hand)."""
        args = ", ".join(f.name for f in _arguments(cls))
        if tail := _tail(cls):
            args += f"; tail (after TAIL, up to its last field sent): {', '.join(f.name for f in tail)}"
        verdicts = " | ".join(v.value for v in cls.VERDICT or ())
        return f"-- KEYS: {', '.join(cls.KEY_NAMES)}   ARGV: {args}   reply: {{{verdicts}, …}}"


# A call's field that is no argument of its script, only what its ``keys`` are built from (an
# endpoint, a tenant and day, the names of its variable keys): ``x: str = field(metadata=KEY_ONLY)``.
KEY_ONLY = MappingProxyType({"agentmill.key_only": True})


# A call's field that only some of its calls need: ``x: str = field(default="", metadata=TAIL)``,
# declared after the rest. The tail's fields go after the rest, in order, up to the last one that
# differs from its default: none when all are their defaults (a script's every argument costs
# Redis's Lua bridge about as much as 40 bytes of it, ~530 instructions), so the fields most
# calls need come first. The Lua reads one as ``ARG.<FIELD>`` too, rendered ``(ARGV[TAIL + k] or
# '<its default>')``: the script sets the local ``TAIL`` to the index of the rest's last argument
# before it reads one; ``ARGN.<FIELD>`` is where the field is (``TAIL + k``): ``ARGV[ARGN.X]`` is
# nil when neither X nor any field after it was sent. The tail's last field may be a rest of its own.
TAIL = MappingProxyType({"agentmill.tail": True})


def _arguments(cls: type[ScriptCall]) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(
        f
        for f in dataclasses.fields(cls)
        if not f.metadata.get("agentmill.key_only") and not f.metadata.get("agentmill.tail")
    )


def _tail(cls: type[ScriptCall]) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.metadata.get("agentmill.tail"))


_ARGV: dict[type[ScriptCall], Callable[[ScriptCall], list[Any]]] = {}


def _argv_of(cls: type[ScriptCall]) -> Callable[[ScriptCall], list[Any]]:
    """``cls``'s argv, written from its fields once per class as dataclasses writes ``__init__``:
    every step's commit builds the argv of some forty fields, and walking their metadata and types
    on each call cost more than all the rest of the commit's building."""
    tail = _tail(cls)
    code = compile(argv_source(cls), f"<{cls.__name__}.argv>", "exec")
    ns: dict[str, Any] = {}
    exec(code, {f"_d{i}": f.default for i, f in enumerate(tail)}, ns)  # the tail's defaults by name
    fn: Callable[[ScriptCall], list[Any]] = ns["argv"]
    _ARGV[cls] = fn
    return fn


def argv_source(cls: type[ScriptCall]) -> str:
    """The source of ``cls``'s argv: its arguments in order (None sent as '', a rest spread), then
    its tail up to its last field that differs from its default (``_d<i>``): none when all do not."""

    def slots(fs: tuple[dataclasses.Field[Any], ...]) -> str:
        return ", ".join(
            f"*self.{f.name}" if _is_rest(f) else f"'' if self.{f.name} is None else self.{f.name}"
            for f in fs
        )

    src = f"def argv(self):\n    out = [{slots(_arguments(cls))}]\n"
    tail = _tail(cls)
    for n in range(len(tail), 0, -1):  # from the last field: the first that differs ends what is sent
        f = tail[n - 1]
        src += f"    {'if' if n == len(tail) else 'elif'} self.{f.name} != _d{n - 1}:\n"
        src += f"        out += [{slots(tail[:n])}]\n"
    return src + "    return out\n"


_TEXT = (bytes, str)  # a tuple: ``bytes | str`` would build a union on every reply
_VERDICTS: dict[type[StrEnum], dict[bytes | str, StrEnum]] = {}


def _verdicts(enum: type[StrEnum]) -> dict[bytes | str, StrEnum]:
    """The enum's members by value, as bytes and as str (a reply's first element, whichever the
    client decodes it to): found with one look-up, not the enum's call, on every commit's reply."""
    if (got := _VERDICTS.get(enum)) is None:
        got = _VERDICTS[enum] = {**{v.value: v for v in enum}, **{v.value.encode(): v for v in enum}}
    return got


def _lua_default(f: dataclasses.Field[Any]) -> str:
    """A tail field's default as the Lua reads it when the tail is not sent (what argv sends it as)."""
    d = f.default
    text = "" if d is None else d.decode() if isinstance(d, bytes) else str(d)
    assert "'" not in text and "\\" not in text, f"{f.name}: a default the Lua cannot quote"
    return text


def _is_rest(f: dataclasses.Field[Any]) -> bool:
    return str(f.type).startswith("tuple")


def bind(call: type[ScriptCall] | None, text: str, script: str) -> str:
    """``text`` (a script's body) with its call's ``ARG.*``, ``KEY.*`` and ``V.*`` tokens rendered;
    a token the call does not declare, or a token in a script with no declared call, raises."""
    table = call.positions() if call is not None else {}

    def sub(m: re.Match[str]) -> str:
        token = m.group(0)
        if token not in table:
            raise ValueError(f"{script}.lua names {token}: its call declares no such slot")
        return table[token]

    return _TOKEN.sub(sub, text)
