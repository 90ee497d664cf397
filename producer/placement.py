"""Where a run lives (shared/keys.py): its session's home partition when it has a session, else its
own id's home. A run living away from its home (a client-chosen or derived id in a session) leaves
a pointer at its home, claimed before its submit, so its id alone finds it (Partitions.locate);
and a run submitted at home first checks that its home does not point elsewhere, where a run of
that id may live already (the scripts only see their own partition). Ids the producer generates
are drawn to live at home and are random, so they need neither."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from agentmill_client.ids import new_run_id
from shared import keys
from shared.calls.submission import SubmitVerdict
from shared.fields import RunField
from shared.replies import text
from shared.script_sending import Parts

__all__ = ["POINTER_EXTRA_S", "Holder", "claim", "generated_id", "locate_many", "partition_of", "verdict"]

POINTER_EXTRA_S = 2 * 86_400  # a pointer outlives its run's retention by this
_RUN_FIELDS = [RunField.TENANT, RunField.INPUT_HASH, RunField.STATUS]
Verdict = tuple[str, str]  # what SUBMIT answers for a run that exists: (verdict, status)


def partition_of(layout: keys.Layout, run_id: str, session_id: str) -> keys.Partition:
    return layout.home(session_id) if session_id else layout.home(run_id)


def generated_id(
    layout: keys.Layout, session_of: Callable[[str], str], key: Callable[[str], str] = str
) -> str:
    """A new run id living at its home: one whose key (``key(id)``, the id its keys use) has its
    session's home (``session_of(id)``, the session's key; '' for none). ``layout.count`` draws are
    expected; one partition: the first."""
    if layout.count == 1:  # every id lives at home
        return new_run_id()
    while True:
        rid = new_run_id()
        sid = session_of(rid)
        if not sid or layout.home(key(rid)) is layout.home(sid):
            return rid


Holder = list[Any] | None  # the fields (_RUN_FIELDS) of the run that holds an id already; None: free


def verdict(holder: list[Any], tenant: str, digest: str) -> Verdict:
    """SUBMIT's answer for a run whose id ``holder`` holds (submit_one.lua): another tenant's, the
    same run, or a conflict."""
    owner, held_digest, status = (text(v) for v in holder)
    if owner != tenant:
        return SubmitVerdict.CONFLICT, ""
    return (SubmitVerdict.EXISTS, status) if held_digest == digest else (SubmitVerdict.CONFLICT, status)


async def claim(parts: Parts, runs: Sequence[tuple[str, keys.Partition]], ttl_s: int) -> list[Holder]:
    """Before runs (id, partition) are submitted, one pipelined round trip per node for all of
    them: a run away from its home points its home at its partition (SET NX); a run at home checks
    that its home points nowhere else. Per run, the run that holds its id already (at home, or
    where its home points), or None when the id is free. A pointer naming a partition where no run
    is (its submit was refused or failed, or the run expired) is taken over by a run going away,
    and ignored by a run at home."""
    if not runs:
        return []
    ops = []
    for rid, part in runs:
        home = parts.home(rid)

        def op(pipe: Any, home: keys.Partition = home, rid: str = rid, part: keys.Partition = part) -> None:
            if part is not home:
                pipe.hmget(home.run(rid), _RUN_FIELDS)
                pipe.set(home.pointer(rid), part.index, nx=True, ex=ttl_s)
            pipe.get(home.pointer(rid))

        ops.append((home, op))
    out: list[Holder] = []
    elsewhere: list[tuple[int, keys.Partition, str]] = []  # runs at home whose home points elsewhere
    for (rid, part), replies in zip(runs, await parts.pipelined(ops), strict=True):
        pointer = replies[-1]
        if part is not parts.home(rid):
            h = replies[0]
            if h[0] is not None:  # a run at home holds the id
                out.append(list(h))
            elif pointer is not None and text(pointer) == str(part.index):
                out.append(None)
            else:
                out.append(await _claim_slowly(parts, rid, part, ttl_s))
            continue
        out.append(None)
        if pointer is not None and text(pointer) != str(part.index):
            elsewhere.append((len(out) - 1, parts.parts[int(text(pointer))], rid))
    if elsewhere:

        def there(q: keys.Partition, rid: str) -> Any:
            return lambda pipe: pipe.hmget(q.run(rid), _RUN_FIELDS)

        found = await parts.pipelined([(q, there(q, rid)) for _, q, rid in elsewhere])
        for (at, _, _), (h,) in zip(elsewhere, found, strict=True):
            out[at] = list(h) if h[0] is not None else None
    return out


async def _claim_slowly(parts: Parts, rid: str, part: keys.Partition, ttl_s: int) -> Holder:
    """A run going away whose home points to another partition: the run there holds the id, else
    the pointer is taken over (under WATCH, so a claim made meanwhile wins)."""
    home = parts.home(rid)
    ptr, run_key = home.pointer(rid), home.run(rid)

    async def attempt(client: Redis) -> tuple[bool, Holder]:  # (settled, holder)
        async with client.pipeline(transaction=True) as pipe:
            await pipe.watch(ptr, run_key)
            h = await pipe.hmget(run_key, _RUN_FIELDS)  # type: ignore[misc]
            if h[0] is not None:
                return True, list(h)
            cur = await pipe.get(ptr)
            if cur is not None and text(cur) != str(part.index):
                there = parts.parts[int(text(cur))]

                async def read(cl: Redis) -> list[Any]:
                    return list(await cl.hmget(there.run(rid), _RUN_FIELDS))  # type: ignore[misc]

                h = await parts.call(there, read)
                if h[0] is not None:
                    return True, h
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.set(ptr, part.index, ex=ttl_s)
            try:
                await pipe.execute()
            except WatchError:
                return False, None  # changed meanwhile: look again
            return True, None

    for _ in range(8):
        settled, holder = await parts.call(home, attempt)
        if settled:
            return holder
    raise WatchError(f"the pointer of run {rid} kept changing")


async def locate_many(parts: Parts, run_ids: Sequence[str]) -> list[keys.Partition | None]:
    """Partitions.locate for many runs: one pipelined round trip per node (none with one partition)."""
    if parts.layout.count == 1:
        return [parts.parts[0]] * len(run_ids)
    ops = []
    for rid in run_ids:
        home = parts.home(rid)

        def op(pipe: Any, home: keys.Partition = home, rid: str = rid) -> None:
            pipe.exists(home.run(rid))
            pipe.get(home.pointer(rid))

        ops.append((home, op))
    out: list[keys.Partition | None] = []
    for rid, (exists, pointer) in zip(run_ids, await parts.pipelined(ops), strict=True):
        if exists:
            out.append(parts.home(rid))
        else:
            out.append(parts.parts[int(text(pointer))] if pointer is not None else None)
    return out
