"""Figure 3c's question asked another way: what Redis spends on a step's commits as ``FCALL``s beside
what it spends on the very commands those calls ran, sent plainly (each commit's in one MULTI/EXEC,
as a client without scripts would send them, their arguments parsed from the socket). Figure 3c sets
a call's time against its commands' own ``usec``, which leaves out what a command sent plainly costs
Redis before and after it runs (its request read and parsed into arguments) while the call's time
holds its arguments' way into Lua: here both sides count everything from the request to the reply.

    bin/dev python -m bench.commit_plain [--runs 5] [--replays 30]

The commits of figure 3c's load and the commands each ran are captured by MONITOR
(bench/commit_capture.py), then replayed on a redis-server under valgrind's callgrind, each run on a
fresh copy of its hash (as bench/commit_parts.py does), collecting inside processInputBuffer (a
request read, parsed and run; writing the replies, the same few bytes both ways, is left out).
Per commit: the instructions of the replay less those of the copies' set-up alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from redis.asyncio import Redis

from bench import callgrind
from bench import commit_parts as cp
from bench.__main__ import Bench
from bench.__main__ import parser as bench_parser
from bench.commit_capture import load
from bench.probes import until_up
from shared.fields import RunField
from shared.scripts import library
from tests.support.redis_server import free_port, redis_server_binary

Call = list[bytes]


def _renamed(cmd: Call, old: bytes, new: bytes) -> Call:
    return [a.replace(old, new) for a in cmd]


async def _replay(
    r: Redis, runs: list[tuple[bytes, list[tuple[Call, list[Call]]]]], how: str, replays: int
) -> int:
    """``replays`` runs' commits (``how``: fcall, plain, or none: the copies' set-up alone); commits sent."""
    sent = 0
    for j in range(replays):
        rid, seq = runs[j % len(runs)]
        new = rid + f"~{j}".encode()
        first = seq[0][0]
        nkeys = int(first[2])
        args = first[3 + nkeys :]
        async with r.pipeline(transaction=False) as pipe:
            pipe.execute_command(
                "HMSET", first[3].replace(rid, new), RunField.EPOCH, args[0], RunField.OWNER, args[2],
                RunField.LAST_SEQ, int(args[1]) - 1, RunField.STATUS, "running",
            )  # fmt: skip
            pipe.execute_command("SET", first[6].replace(rid, new), b"1")  # the worker's lease
            for call, ran in seq if how != "none" else ():
                sent += 1
                if how == "fcall":
                    pipe.execute_command(*cp.renamed(call, rid, new))
                    continue
                pipe.execute_command("MULTI")
                for cmd in ran:
                    pipe.execute_command(*_renamed(cmd, rid, new))
                pipe.execute_command("EXEC")
            await pipe.execute(raise_on_error=True)
    return sent


async def _instructions(runs: list[tuple[bytes, list[tuple[Call, list[Call]]]]], how: str, replays: int,
                        contexts: list[bytes]) -> tuple[float, int]:  # fmt: skip
    port = free_port()
    out = f"/tmp/commit_plain.{port}.callgrind"
    argv = ["valgrind", "--tool=callgrind", "--toggle-collect=processInputBuffer", f"--callgrind-out-file={out}",
            redis_server_binary() or "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    r = Redis(port=port)
    try:
        await until_up(r)
        await r.execute_command("FUNCTION", "LOAD", library().code)  # type: ignore[no-untyped-call]
        await cp.tell_contexts(r, contexts)
        sent = await _replay(r, runs, how, replays)
        with contextlib.suppress(Exception):
            await r.execute_command("SHUTDOWN", "NOSAVE")  # type: ignore[no-untyped-call]
    finally:
        await r.aclose()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 60)
        if proc.returncode is None:
            proc.kill()
    return callgrind.totals(out).get("processInputBuffer", 0.0), sent


async def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--replays", type=int, default=30)
    a = ap.parse_args(argv)
    b = Bench(bench_parser().parse_args(["--only", "functions"]))
    b.server.start()
    r = Redis.from_url(b.server.url)
    try:
        inner: list[list[Call]] = []
        calls = await load(b, r, a.runs, inner=inner)
    finally:
        await r.aclose()
        for p in b.procs:
            b.stop(p)
        b.server.stop()
    contexts = cp.contexts_argv(calls)
    by: dict[bytes, list[tuple[Call, list[Call]]]] = {}
    for call, ran in zip(calls, inner, strict=True):
        if not call[1].startswith(b"contexts_"):
            by.setdefault(call[3 + int(call[2]) + 3], []).append((call, ran))
    runs = list(by.items())
    n_cmds = sum(len(ran) for _, seq in runs for _, ran in seq) / sum(len(seq) for _, seq in runs)
    print(
        f"captured {sum(len(s) for _, s in runs)} commits of {len(runs)} runs, {n_cmds:.1f} commands a commit"
    )
    base, _ = await _instructions(runs, "none", a.replays, contexts)
    for how in ("fcall", "plain"):
        total, sent = await _instructions(runs, how, a.replays, contexts)
        print(
            f"{how:6s} {(total - base) / sent:10,.0f} instructions a commit (request read, parsed, run)",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
