"""The commits bench/commit_parts.py replays, captured: the bench's figure 3c load (ten echo steps a
run, one worker, FCALL) run while a MONITOR connection records every ``FCALL commit_…`` a client
sends, each parsed back into its arguments, and the ``FCALL contexts_…`` that told the library the
context tokens those calls send (shared.functions)."""

from __future__ import annotations

import asyncio
import re

from redis.asyncio import Redis

from bench import figures_functions as ff
from bench.__main__ import Bench
from bench.plumbing import run_ids

__all__ = ["capture", "load", "monitor_args"]


_ESC = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", "\\": b"\\", '"': b'"'}


def monitor_args(line: bytes) -> list[bytes]:
    """The arguments of one MONITOR line (``ts [db addr] "arg" "arg" ...``, sdscatrepr-escaped)."""
    out: list[bytes] = []
    i = line.index(b"] ") + 2
    n = len(line)
    while i < n:
        if line[i] != 0x22:  # '"'
            i += 1
            continue
        i += 1
        buf = bytearray()
        while line[i] != 0x22:
            c = line[i]
            if c == 0x5C:  # backslash
                e = chr(line[i + 1])
                if e == "x":
                    buf.append(int(line[i + 2 : i + 4], 16))
                    i += 4
                    continue
                buf += _ESC[e]
                i += 2
                continue
            buf.append(c)
            i += 1
        out.append(bytes(buf))
        i += 1
    return out


async def capture(
    url: str, until: asyncio.Event, *name_prefixes: bytes, inner: list[list[list[bytes]]] | None = None
) -> list[list[bytes]]:
    """Every ``FCALL <name_prefix>…`` a client sent until ``until``; with ``inner``, the commands
    each of them ran appended to it (MONITOR shows them after their call, marked ``lua``)."""
    host, port = re.match(r"redis://([^:/]+):(\d+)", url).groups()  # type: ignore[union-attr]
    reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 26)
    writer.write(b"MONITOR\r\n")
    await writer.drain()
    await reader.readline()  # +OK
    got: list[list[bytes]] = []
    open_ = False  # the last call seen was captured: the lua lines after it are its commands
    while not until.is_set():
        try:
            line = await asyncio.wait_for(reader.readline(), 0.5)
        except TimeoutError:
            continue
        if b" lua]" in line[:80]:  # a command a script ran: its call's, if captured
            if inner is not None and open_:
                inner[-1].append(monitor_args(line.rstrip(b"\r\n")[1:]))
            continue
        open_ = any(b' "FCALL" "' + p in line[:200] for p in name_prefixes)
        if open_:
            got.append(monitor_args(line.rstrip(b"\r\n")[1:]))  # its leading '+'
            if inner is not None:
                inner.append([])
    writer.close()
    return got


async def load(
    b: Bench,
    r: Redis,
    runs: int,
    agent: str = "scripted-effects",
    inner: list[list[list[bytes]]] | None = None,
) -> list[list[bytes]]:
    """Figure 3c's load (one worker, FCALL, the echo tool with side effects), its commits captured
    (the warm-up run's left out) after the contexts calls that told the library their tokens; with
    ``inner``, the commands each ran (``capture``), in the same order."""
    await b.flush(r)
    profiles = b.pure_profiles()
    producer = b.producer(r, redis_functions="on", profiles=profiles)
    done = asyncio.Event()
    ran: list[list[list[bytes]]] = []
    task = asyncio.create_task(capture(b.server.url, done, b"commit_", b"contexts_", inner=ran))
    await asyncio.sleep(0.2)
    proc = b.spawn(["-m", "app.worker"], AGENTMILL_REDIS_FUNCTIONS="on", AGENTMILL_PROFILES=profiles)
    try:
        warm = await producer.submit_many([b.script_run([{"text": "warm"}])])
        await b._ended(producer, run_ids(warm))
        script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * ff.STEPS + [
            {"text": "done"}
        ]
        subs = await producer.submit_many([b.script_run(script, agent=agent)] * runs)
        await b._ended(producer, run_ids(subs))
        await asyncio.sleep(0.3)
    finally:
        done.set()
        b.stop(proc)
    got = await task
    measured = {rid.encode() for rid in run_ids(subs)}
    kept = [i for i, c in enumerate(got) if c[1].startswith(b"contexts_") or c[3 + int(c[2]) + 3] in measured]
    if inner is not None:
        inner += [ran[i] for i in kept]
    return [got[i] for i in kept]
