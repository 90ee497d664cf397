"""As a Redis Functions library, the scripts' shared files (clock.lua, prelude.lua, …) run once, when
the library loads, and their locals live from one call to the next: every one a call changes must be
reset at the start of each call, by its file's ``enter_<file>`` (shared.scripts). A local added to a
shared file and changed by a script, but not reset, fails here, before it leaks one call's state
(its clock reading, its partition) into the next."""

from __future__ import annotations

import re

from shared.scripts import LUA_DIR, SCRIPTS, library, source

# Kept across calls on purpose: the parsed partition contexts (a cache keyed by the raw context or its
# token) and the fixed keys of the tokens sent without them.
KEPT = {("prelude", "CTX_OF"), ("prelude", "CTX_COUNT"), ("prelude", "FIXED_OF")}
# An assignment ``A = …`` or ``A, B = …`` anywhere (a one-line function's too); a declaration
# (``local A = …``) is not one.
_ASSIGN = re.compile(r"(?<![\w.:'\"])((?:[A-Za-z_]\w*\s*,\s*)*[A-Za-z_]\w*)\s*=(?!=)")


def _code(name: str) -> str:
    return re.sub(r"--.*$", "", (LUA_DIR / f"{name}.lua").read_text(), flags=re.M)


def _shared() -> list[str]:
    out: list[str] = []
    for parts in SCRIPTS.values():
        out += [p for p in parts[:-1] if p not in out]
    return out


_INDEXED = re.compile(r"(?<![\w.:'\"])([A-Za-z_]\w*)\[[^\]=]*\]\s*=(?!=)")  # ``T[k] = …`` changes T


def _assigned(code: str) -> set[str]:
    return {
        n.strip()
        for m in _ASSIGN.finditer(code)
        if not code[: m.start()].endswith("local ")
        for n in m.group(1).split(",")
    } | {m.group(1) for m in _INDEXED.finditer(code)}


def _enter_body(part: str, code: str) -> str:
    # a function on one line, else its own end at column 0 (a loop's `end` may close a line inside it)
    m = re.search(rf"local function enter_{part}\(.*?\)(.*?)\bend\s*$", code, re.M) or re.search(
        rf"local function enter_{part}\(.*?\)(.*?)^end\b", code, re.S | re.M
    )
    return m.group(1) if m else ""


def test_every_shared_local_a_call_changes_is_reset_when_the_call_starts() -> None:
    everything = "".join(_code(p.stem) for p in LUA_DIR.glob("*.lua"))
    changed = _assigned(everything)  # assigned after its declaration, or one of its entries, anywhere
    leaks = []
    for part in _shared():
        code = _code(part)
        declared = {n.strip() for m in re.finditer(r"^local (?!function)([\w, ]+?)\s*=", code, re.M)
                    for n in m.group(1).split(",")}  # fmt: skip
        reset = _assigned(_enter_body(part, code))
        leaks += [
            f"{part}.lua: {n}" for n in sorted(declared & changed) if n not in reset and (part, n) not in KEPT
        ]
    assert leaks == [], "reset these in enter_<file>(KEYS, ARGV) (or list a deliberate cache in KEPT)"


def test_the_rule_sees_a_leak() -> None:
    code = "local N = nil\nlocal function f() N = 1 end\nlocal function enter_x(KEYS, ARGV)\n  M = 2\nend\n"
    assert "N" in _assigned(code) and "N" not in _assigned(_enter_body("x", code))
    assert _assigned("local T = {}\nlocal function f(k) T[k] = true end\n") == {"T"}


def test_each_script_runs_its_shared_files_enter_before_its_body() -> None:
    assert "enter_prelude(KEYS, ARGV)\n-- KEYS: run, session" in source("commit")
    assert "enter_prelude" not in source("capacity_acquire") and "enter_clock(KEYS, ARGV)" in source(
        "capacity_acquire"
    )
    code = library().code
    assert code.startswith(f"#!lua name={library().name}\n")
    assert code.count("redis.register_function(") == len(SCRIPTS) + 1  # and contexts (shared.functions)


def test_every_lua_file_is_in_the_library() -> None:
    """A script added to shared/lua/ joins the library by its entry in SCRIPTS (there is no other
    way to register one): every file is a script's body or a shared file, and each script a function."""
    used = {p for parts in SCRIPTS.values() for p in parts}
    assert sorted(p.stem for p in LUA_DIR.glob("*.lua")) == sorted(used)
    code = library().code
    assert [n for n in SCRIPTS if f"redis.register_function('{n}_{library().version}'," not in code] == []
