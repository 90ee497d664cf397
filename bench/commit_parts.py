"""Where a commit's FCALL time goes: the commits of the bench's figure 3c load (ten echo steps a run,
one worker, FCALL), captured by MONITOR, replayed on the bench's own redis-server in variants that
each leave one part out, alternated so the machine's load hits them alike.

    bin/dev python -m bench.commit_parts [--runs 5] [--replays 150] [--rounds 4]

Each replay runs one captured run's commits in order on a fresh copy of the run (its hash as its
worker's acquisition left it, set by HMSET: counted apart from the commits' HSETs), so every commit
passes its gate and does its real work. Per variant: INFO commandstats' FCALL usec per call (wall
time inside the call, its commands included) and the commands it ran (their own usec, per FCALL):
the difference is Lua and its bridge to Redis.

Variants: ``as captured``; ``payloads {}`` (each event's payload replaced by ``{}``); ``no
checkpoint`` (ckpt '' : unchanged); ``no claims`` (no tool claims: the claims JSON never decoded or
encoded); ``noop function`` (the same keys and arguments to a function that returns at once: the
call's own cost and its arguments' conversion into Lua); ``missing`` (the run absent: the prelude and
one HMGET, figure 3d). The capture is bench/commit_capture.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import os
import pickle
import re
import subprocess
import sys
from collections.abc import Callable

from redis.asyncio import Redis

from bench import callgrind
from bench.__main__ import Bench
from bench.__main__ import parser as bench_parser
from bench.commit_capture import load
from bench.probes import until_up
from shared.calls.steps import Commit
from shared.fields import RunField
from tests.support.redis_server import free_port, redis_server_binary

NOOP_LIBRARY = (
    "#!lua name=commit_parts_noop\nredis.register_function('noop', function(KEYS, ARGV) return 1 end)\n"
)


Call = list[bytes]


def by_run(calls: list[Call]) -> dict[bytes, list[Call]]:
    """Captured commits (``current``) per run id (ARGV[4]: after epoch, firstSeq, lease)."""
    out: dict[bytes, list[Call]] = collections.defaultdict(list)
    for c in calls:
        nkeys = int(c[2])
        out[c[3 + nkeys + 3]].append(c)
    return out


def current(call: Call) -> Call:
    """A captured commit for this checkout's library: its function's name (the library's version)."""
    from shared.scripts import library

    nkeys = int(call[2])
    args = call[3 + nkeys :]
    if b"\x1f" in args[0] and b"\x1f" not in args[-1]:  # captured with the context first: last now
        args = [*args[1:], args[0]]
    return [call[0], b"commit_" + library().version.encode(), *call[2 : 3 + nkeys], *args]


def renamed(call: Call, old: bytes, new: bytes) -> Call:
    """The call for a copy of the run named ``new``: its keys and run id argument."""
    nkeys = int(call[2])
    keys = [k.replace(old, new) for k in call[3 : 3 + nkeys]]
    args = list(call[3 + nkeys :])
    args[3] = new
    return [*call[:3], *keys, *args]


# ARGV index (0-based; the context is last) of each of commit.lua's fields (shared.calls.steps.Commit)
_AT = {f.name: i for i, f in enumerate(dataclasses.fields(Commit))}


def _events(args: list[bytes]) -> tuple[int, int]:
    """ARGV index of the first event (its kind), and the events' count."""
    return _AT["sections"], int(args[_AT["n_events"]])


def no_payloads(call: Call) -> Call:
    nkeys = int(call[2])
    args = list(call[3 + nkeys :])
    at, n = _events(args)
    for k in range(n):
        args[at + 1 + 2 * k] = b"{}"  # (kind, payload per event)
    return [*call[: 3 + nkeys], *args]


def no_checkpoint(call: Call) -> Call:
    nkeys = int(call[2])
    args = list(call[3 + nkeys :])
    args[_AT["ckpt"]] = b""
    return [*call[: 3 + nkeys], *args]


def no_claims(call: Call) -> Call:
    nkeys = int(call[2])
    args = list(call[3 + nkeys :])
    at, n = _events(args)
    c = at + 2 * n
    nc = int(args[_AT["n_claims"]])
    del args[c : c + 2 * nc]
    args[_AT["n_claims"]] = b"0"
    return [*call[: 3 + nkeys], *args]


BASE: dict[str, bytes] = {}  # --base-library: that library's version, and whether it takes the context first
# The captured contexts calls' tokens (shared.functions): token -> (the context, the fixed keys sent
# with it: none for a token sent with them)
TOKENS: dict[bytes, tuple[bytes, list[bytes]]] = {}


def contexts_argv(calls: list[Call]) -> list[bytes]:
    """The captured contexts calls' arguments (their tokens in ``TOKENS``), for this library's."""
    argv = [a for c in calls if c[1].startswith(b"contexts_") for a in c[3 + int(c[2]) :]]
    for i in range(0, len(argv), 11):
        TOKENS[argv[i]] = (argv[i + 2], [])
        TOKENS[argv[i + 1]] = (argv[i + 2], argv[i + 3 : i + 11])
    return argv


async def tell_contexts(r: Redis, argv: list[bytes]) -> None:
    from shared.scripts import library

    if argv:
        await r.execute_command("FCALL", "contexts_" + library().version, 0, *argv)  # type: ignore[no-untyped-call]


def full_form(call: Call) -> Call:
    """A call sent with a context token as the library before them takes it: the context, the fixed keys."""
    nkeys = int(call[2])
    args = call[3 + nkeys :]
    if args[-1] not in TOKENS:
        return call
    context, fixed = TOKENS[args[-1]]
    return [*call[:2], str(nkeys + len(fixed)).encode(), *call[3 : 3 + nkeys], *fixed, *args[:-1], context]


def on_base(call: Call) -> Call:
    """The call as another checkout's library (``--base-library``: its context whole, first or last) takes it."""
    call = full_form(call)
    nkeys = int(call[2])
    args = call[3 + nkeys :]
    if BASE["context_first"]:
        args = [args[-1], *args[:-1]]
    return [call[0], b"commit_" + BASE["version"], *call[2 : 3 + nkeys], *args]


def noop(call: Call) -> Call:
    return [call[0], b"noop", *call[2:]]


def noop_bare(call: Call) -> Call:
    return [call[0], b"noop", b"0"]


def noop_small(call: Call) -> Call:
    """As many keys and arguments, each of one byte."""
    return [call[0], b"noop", call[2], *(b"x" for _ in call[3:])]


VARIANTS: dict[str, Callable[[Call], Call]] = {
    "as captured": lambda c: c,
    "payloads {}": no_payloads,
    "no checkpoint": no_checkpoint,
    "no claims": no_claims,
    "noop function": noop,
    "noop, args of 1 B": noop_small,
    "noop, no args": noop_bare,
}


async def replay(r: Redis, runs: dict[bytes, list[Call]], variant: Callable[[Call], Call], replays: int,
                 tag: str, missing: bool = False) -> dict[str, float]:  # fmt: skip
    """``replays`` copies of the captured runs' commits, in order, each on a fresh copy of its run."""
    ids = list(runs)
    await r.config_resetstat()
    calls = 0
    for j in range(replays):
        rid = ids[j % len(ids)]
        seq = runs[rid]
        new = rid + f"~{tag}{j}".encode()
        first = seq[0]
        nkeys = int(first[2])
        args = first[3 + nkeys :]
        async with r.pipeline(transaction=False) as pipe:
            if not missing:
                run_key = first[3].replace(rid, new)
                pipe.execute_command(
                    "HMSET", run_key, RunField.EPOCH, args[0], RunField.OWNER, args[2],
                    RunField.LAST_SEQ, int(args[1]) - 1, RunField.STATUS, "running",
                )  # fmt: skip
                pipe.execute_command("SET", first[6].replace(rid, new), b"1")  # the worker's lease
            for c in seq:
                pipe.execute_command(*variant(renamed(c, rid, new)))
                calls += 1
            replies = await pipe.execute(raise_on_error=True)
        bad = [
            x
            for x in replies[0 if missing else 2 :]
            if not (isinstance(x, list) and x[0] in (b"ok", b"missing"))
        ]
        if bad and not variant.__name__.startswith("noop"):
            raise RuntimeError(f"{tag}: a replayed commit was refused: {bad[0]!r}")
    stats = await r.info("commandstats")
    fcall = stats["cmdstat_fcall"]
    inside = {
        k.removeprefix("cmdstat_"): v["usec"] / calls
        for k, v in stats.items()
        if k not in ("cmdstat_fcall", "cmdstat_hmset", "cmdstat_set", "cmdstat_config", "cmdstat_info")
    }
    setn = stats.get("cmdstat_set", {"calls": 0, "usec": 0})
    if setn["calls"] > replays:  # the commits' own SETs (a transcript): the leases' SETs out
        inside["set"] = setn["usec"] * (setn["calls"] - replays) / setn["calls"] / calls
    return {"fcall": fcall["usec"] / calls, "inside": sum(inside.values()), "calls": calls,
            **{f"cmd:{k}": v for k, v in inside.items()}}  # fmt: skip


def _report(got: dict[str, list[dict[str, float]]], unit: str) -> None:
    print(f"{'variant':28s} {'FCALL ' + unit:>14s} {'commands':>10s} {'rest':>8s} {'ratio':>6s}")
    for name, rows in got.items():
        f = sorted(x["fcall"] for x in rows)[len(rows) // 2]
        i = sorted(x["inside"] for x in rows)[len(rows) // 2]
        print(f"{name:28s} {f:14.1f} {i:10.1f} {f - i:8.1f} {f / i if i else 0:6.2f}")


async def wall(r: Redis, runs: dict[bytes, list[Call]], a: argparse.Namespace) -> None:
    """commandstats usec per call, the variants alternated on one server."""
    got: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    for rnd in range(a.rounds):
        for name, v in VARIANTS.items():
            if a.variants is not None and name not in a.variants:
                continue
            await r.flushdb()
            got[name].append(await replay(r, runs, v, a.replays, f"{rnd}{name[:2]}"))
        await r.flushdb()
        got["missing (prelude + HMGET)"].append(
            await replay(r, runs, lambda c: c, a.replays, f"{rnd}m", True)
        )
    _report(got, "µs/call")
    cmds: dict[str, float] = collections.defaultdict(float)
    base = got["as captured"]
    for row in base:
        for name, us in row.items():
            if name.startswith("cmd:"):
                cmds[name[4:]] += us / len(base)
    top = sorted(cmds.items(), key=lambda kv: -kv[1])[:12]
    print("as captured, commands per FCALL (µs):", ", ".join(f"{k} {v:.1f}" for k, v in top))


def _callgrind_server(port: int, out: str) -> subprocess.Popen[bytes]:
    """A redis-server under callgrind, collecting inside fcallCommand only."""
    argv = ["valgrind", "--tool=callgrind", "--toggle-collect=fcallCommand", f"--callgrind-out-file={out}",
            redis_server_binary() or "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def instructions(runs: dict[bytes, list[Call]], a: argparse.Namespace) -> None:
    """Instructions per FCALL (valgrind's callgrind, collecting inside fcallCommand only): exact and
    load-insensitive. One redis-server under callgrind per variant."""
    from shared.scripts import library

    got: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    todo: list[tuple[str, Callable[[Call], Call], bool]] = [(n, v, False) for n, v in VARIANTS.items()]
    todo.append(("missing (prelude + HMGET)", VARIANTS["as captured"], True))
    todo = [t for t in todo if a.variants is None or t[0] in a.variants]
    for name, v, missing in todo:
        port = free_port()
        out = f"/tmp/commit_parts.{port}.callgrind"
        proc = _callgrind_server(port, out)
        r = Redis(port=port)
        try:
            await until_up(r)
            await r.execute_command("FUNCTION", "LOAD", library().code)  # type: ignore[no-untyped-call]
            await r.execute_command("FUNCTION", "LOAD", NOOP_LIBRARY)  # type: ignore[no-untyped-call]
            await tell_contexts(r, a.contexts)
            row = await replay(r, runs, v, a.replays, "cg", missing)
            with contextlib.suppress(Exception):  # the server goes away while it answers
                await r.execute_command("SHUTDOWN", "NOSAVE")  # type: ignore[no-untyped-call]
        finally:
            await r.aclose()
            if proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(60)
            if proc.poll() is None:
                proc.kill()
        t = callgrind.totals(out)  # fcallCommand, call'2 (the commands it ran), lua_pcall, scriptCall
        calls = row["calls"]
        got[name].append({"fcall": t.get("fcallCommand", 0) / calls, "inside": t.get("call'2", 0) / calls})
        parts = {k: t.get(k, 0) / calls for k in ("lua_pcall", "scriptCall", "call'2", "lua_pushlstring")}
        print(f"  {name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in parts.items()), flush=True)
    _report(got, "instr/call")


async def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--replays", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", default="", help="a file of captured commits: read if present, else written")
    ap.add_argument(
        "--callgrind", action="store_true", help="instructions per call (valgrind) instead of usec"
    )
    ap.add_argument(
        "--agent", default="scripted-effects", help="scripted-pure: echo declared sideEffects: false"
    )
    ap.add_argument("--variants", nargs="*", default=None, help="only these variants")
    ap.add_argument(
        "--base-library", default="", help="a file of another checkout's library: replayed beside"
    )
    ap.add_argument("--hold", default="", help="replay this variant for --hold-s seconds (for perf -p)")
    ap.add_argument("--hold-s", type=float, default=20)
    a = ap.parse_args(argv)
    b = Bench(bench_parser().parse_args(["--only", "functions"]))
    b.server.start()
    r = Redis.from_url(b.server.url)
    try:
        if a.calls and os.path.exists(a.calls):
            with open(a.calls, "rb") as f:
                calls = pickle.load(f)
        else:
            calls = await load(b, r, a.runs, a.agent)
            if a.calls:
                with open(a.calls, "wb") as f:
                    pickle.dump(calls, f)
        runs = by_run([current(c) for c in calls if not c[1].startswith(b"contexts_")])
        a.contexts = contexts_argv(calls)
        one = next(iter(runs.values()))
        print(
            f"captured {len(calls)} commits of {len(runs)} runs; {sum(len(x) for c in one for x in c) / len(one):.0f} B a call"
        )
        if a.callgrind:
            await instructions(runs, a)
            return
        from shared.scripts import library

        await r.execute_command("FUNCTION", "LOAD", "REPLACE", library().code)
        await tell_contexts(r, a.contexts)
        if a.base_library:
            with open(a.base_library) as f:
                code = f.read()
            BASE["version"] = re.search(r"name=agentmill_(\w+)", code).group(1).encode()  # type: ignore[union-attr]
            BASE["context_first"] = b"" if "ARGV[na]" in code else b"1"
            await r.execute_command("FUNCTION", "LOAD", "REPLACE", code)
            VARIANTS["as captured, base library"] = on_base
        await r.execute_command("FUNCTION", "LOAD", "REPLACE", NOOP_LIBRARY)
        if a.hold:
            pid = (await r.info("server"))["process_id"]
            print(f"redis-server pid {pid}: replaying {a.hold!r} for {a.hold_s} s", flush=True)
            t_end = asyncio.get_running_loop().time() + a.hold_s
            k = 0
            while asyncio.get_running_loop().time() < t_end:
                await r.flushdb()
                await replay(r, runs, VARIANTS[a.hold], a.replays, f"h{k}")
                k += 1
            return
        await wall(r, runs, a)
    finally:
        await r.aclose()
        for p in b.procs:
            b.stop(p)
        b.server.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
