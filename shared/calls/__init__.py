"""Script calls declared once: one frozen dataclass per script (``shared.calls.base.ScriptCall``),
whose fields in order ARE the script's arguments after the partition's context. The Lua reads them
by name (``ARG.RUN_ID``), rendered to their positions when the library is built
(``shared.scripts.render``): nothing costs more at run time, and Python and Lua cannot disagree on a
slot. A reply's verdicts are an enum the Lua spells ``V.<NAME>`` and Python compares against.

Each call is declared in the module of its concern (``shared.calls.runs``, ``shared.calls.steps``, …)
and exported by that module's ``__all__``; callers import it from there. ``CALLS`` (script name ->
its call class) is built from those exports: a new call is declared once, by its class."""

from __future__ import annotations

import importlib
import pkgutil

from shared.calls.base import ScriptCall

__all__ = ["CALLS", "ScriptCall", "declared_calls"]


def declared_calls() -> dict[str, type[ScriptCall]]:
    """Every ScriptCall subclass the modules of this package export (``__all__``), by its script;
    two classes of one script raise."""
    out: dict[str, type[ScriptCall]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name in getattr(module, "__all__", ()):
            c = getattr(module, name)
            if isinstance(c, type) and issubclass(c, ScriptCall) and c is not ScriptCall:
                if c.SCRIPT in out:
                    raise ValueError(f"{c.SCRIPT}: declared by {out[c.SCRIPT].__name__} and {c.__name__}")
                out[c.SCRIPT] = c
    return out


CALLS: dict[str, type[ScriptCall]] = declared_calls()
