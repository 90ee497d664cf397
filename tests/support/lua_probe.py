"""A probe script for tests of the shared Lua files' functions: clock.lua and prelude.lua, their
per-call starts (``enter_clock()``, ``enter_prelude()``, as every script runs them since the Redis
Functions library: shared.scripts.source), then ``body``, rendered as a script is."""

from __future__ import annotations

from shared.scripts import LUA_DIR, _enter, render

__all__ = ["prelude_probe"]

SHARED = ("clock", "prelude")


def prelude_probe(body: str) -> str:
    return render(
        "".join((LUA_DIR / f"{p}.lua").read_text() for p in SHARED) + "".join(map(_enter, SHARED)) + body
    )
