"""Sub-agents across partitions: a parent's child runs created, a child's ending delivered to its
parent, a parent's ending passed on to its children, and a parent's children read back.

A child lives at its own id's home partition, which on a Redis Cluster is often another node than its
parent's, so no one script can touch both. Each step is one script on one partition, and each is
idempotent, so it can be done again until it is done:

- **creation** (``spawn``, by the parent's worker while the parent holds its run): ``spawn_child.lua``
  on the child's partition creates the run under an id derived from the parent's and the call's
  (``worker.machine.child_run_id``); made again, it finds the same run.
- **the ending's handoff** (``hand_off``): a run's ending script marks what it owes (run field
  ``handoff``: ``d`` its result to its parent, ``a`` an abort to its children) and puts the run in its
  partition's live index, due at once: an outbox on the ending run's own partition, written in the
  same atomic step as the ending. The worker that ended the run hands it off right after its commit;
  the reconciler does it for any run still marked (a worker that died in between, a run ended from
  outside: aborted while queued or parked, a poison run). Then the mark is cleared.
- **delivery** (``deliver``): ``child_result.lua`` on the parent's partition records the child's
  result as the record of the call that started it (with the child's usage, its children's included,
  which the parent's budget counts), once per call (a repeat is a no-op), and puts a
  parent parked in ``awaiting_children`` back on the queue when this was its last open child.
- **cascade** (``cascade``): every child of the parent's current round is aborted (``abort.lua`` on
  its partition; a child that already ended answers ``finished``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from agentmill_client import limits
from agentmill_client.models import RunInput, RunResult, Usage
from agentmill_client.statuses import RunStatus
from shared import keys, payload_crypto
from shared.actors import actor_json, system
from shared.calls.admissions import TreeAdmit, TreeVerdict
from shared.calls.results import ChildResult
from shared.calls.runs import Abort
from shared.calls.submission import SpawnChild, Submit, SubmitVerdict
from shared.fields import RunField
from shared.partitions import Partitions
from shared.quotas import ACTIVE_GRACE_MS, DEFAULT_TENANT, Quota
from shared.replies import text
from shared.script_sending import run_script
from shared.scripts import Scripts
from shared.stored_input import stored_input

__all__ = [
    "ChildSpec",
    "Spawned",
    "cascade",
    "child_input",
    "child_runs",
    "deliver",
    "hand_off",
    "orphan_reason",
    "parent_status",
    "result_record",
    "spawn",
    "subtree_usage",
]

F = RunField


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """One child to create: the parent's call, the child's id, its agent and its task."""

    call_id: str
    child_id: str
    agent: str
    task: str
    budget: dict[str, Any] | None = None  # the child's RunInput.budget (JSON): its parent's remainder
    store_content: bool = True  # False: its parent stores no content, nor does it (RunInput.storeContent)


@dataclass(frozen=True, slots=True)
class Spawned:
    """A child's creation: ``created`` (False: it existed already), its stream key, or why not."""

    created: bool = False
    stream_key: str = ""
    error: str = ""


def child_input(spec: ChildSpec) -> RunInput:
    """The child's RunInput (validated as a submitted one is): its agent, its task as its one user
    message, its budget and, when it stores none, storeContent false. ValidationError when a
    submission of it would be refused (a task longer than a message may be)."""
    body: dict[str, Any] = {"agent": spec.agent, "inputMessages": [{"role": "user", "content": spec.task}]}
    if spec.budget:
        body["budget"] = spec.budget
    if not spec.store_content:
        body["storeContent"] = False
    return RunInput.model_validate(body)


async def spawn(
    parts: Partitions[Any],
    scripts: Scripts,
    *,
    parent_id: str,
    tenant: str,
    lineage: bytes,
    specs: Sequence[ChildSpec],
    trace: str = "",
    root_id: str = "",
    quota: Quota | None = None,
    ttl_ms: int = 604_800_000,
) -> dict[str, Spawned]:
    """Create each child on its partition (one script each, all at once): toolCallId -> Spawned.
    ``trace``: the context the children's traces continue (the parent attempt's span; '' = none).
    With a ``quota``, the children are first counted in their root's tree (``root_id``, '' = the
    parent is the root: maxChildren, maxDescendants), then each against the tenant's maxActive as
    its script creates it (``ttl_ms``: the active set's expiry); a child over a cap is not created,
    and its Spawned names the cap. A disabled tenant's children are all refused, with no round trip."""
    if quota is not None and quota.disabled:  # its tenant starts nothing new (shared/quotas.py)
        why = (f'sub-agent refused: tenant {tenant or DEFAULT_TENANT} is disabled ("disabled": true in '
               "AGENTMILL_TENANT_QUOTAS); the child was not started")  # fmt: skip
        return {s.call_id: Spawned(error=why) for s in specs}
    refused = await _tree_admit(parts, scripts, root_id or parent_id, parent_id, specs, quota)
    rooms = await _active_rooms(parts, tenant, quota)

    async def one(spec: ChildSpec) -> Spawned:
        if spec.call_id in refused:
            return Spawned(error=refused[spec.call_id])
        part = parts.home(spec.child_id)
        cid = spec.child_id
        try:
            stored = stored_input(child_input(spec), cid)
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            return Spawned(error=f"the child run {cid} could not be created: its input is not valid ({why})")
        run = Submit(cid, stored.body, stored.digest, tenant, agent=spec.agent, trace=trace,
                     no_content="0" if spec.store_content else "1")  # fmt: skip
        room = "" if rooms is None else rooms[part.index]
        call = SpawnChild(parent_id, spec.call_id, lineage, room, ttl_ms, ACTIVE_GRACE_MS, run)
        r = await run_script(
            parts, scripts.spawn_child, *scripts.framing.call(part, call.keys(part), call.argv())
        )
        verdict = SpawnChild.verdict(r)
        if verdict in (SubmitVerdict.CREATED, SubmitVerdict.EXISTS):
            return Spawned(verdict is SubmitVerdict.CREATED, part.events(cid))
        if verdict is SubmitVerdict.QUOTA_EXCEEDED and quota is not None:
            return Spawned(error=f"sub-agent refused: maxActive={quota.max_active} reached (this tenant's "
                           "runs that have not ended, parked parents and their children included, fill its "
                           "quota); the child was not started")  # fmt: skip
        return Spawned(error=f"the child run {cid} could not be created ({verdict})")

    done = await asyncio.gather(*(one(s) for s in specs))
    return {s.call_id: d for s, d in zip(specs, done, strict=True)}


async def _tree_admit(
    parts: Partitions[Any],
    scripts: Scripts,
    root_id: str,
    parent_id: str,
    specs: Sequence[ChildSpec],
    quota: Quota | None,
) -> dict[str, str]:
    """The children the root's tree has no room for (tree_admit.lua, at the root's home partition):
    toolCallId -> why (the cap it names). Counted children stay counted (a tree only grows)."""
    if quota is None or not specs or (quota.max_children == 0 and quota.max_descendants == 0):
        return {}
    home = parts.home(root_id)
    admit = TreeAdmit(
        root_id, parent_id, quota.max_children, quota.max_descendants, tuple(s.child_id for s in specs)
    )
    call = scripts.framing.call(home, admit.keys(home), admit.argv())
    verdicts = [TreeVerdict(text(v)) for v in await run_script(parts, scripts.tree_admit, *call)]
    why = {
        TreeVerdict.MAX_CHILDREN: f"sub-agent refused: maxChildren={quota.max_children} reached (this run has "
        f"started {quota.max_children} child runs, the most its tenant's quota allows one run)",
        TreeVerdict.MAX_DESCENDANTS: f"sub-agent refused: maxDescendants={quota.max_descendants} reached (the "
        f"tree of root run {root_id} holds {quota.max_descendants} child runs, the most its tenant's quota allows)",
    }
    return {s.call_id: why[v] for s, v in zip(specs, verdicts, strict=True) if v in why}


async def _active_rooms(parts: Partitions[Any], tenant: str, quota: Quota | None) -> list[int] | None:
    """Per partition, the tenant's maxActive less its runs counted on the other partitions (None:
    no maxActive). With one partition, the quota itself: its script sees every counted run."""
    if quota is None or quota.max_active == 0:
        return None
    if len(parts.parts) == 1:
        return [quota.max_active]

    def op(pipe: Any, p: keys.Partition) -> None:
        pipe.zcard(p.tenant_active(tenant))

    counts = [int(r[0]) for r in await parts.each(op)]
    return [quota.max_active - (sum(counts) - here) for here in counts]


def result_record(child_id: str, call_id: str, status: str, result: RunResult | None) -> bytes:
    """The parent's tool record of a child's ending: its answer, or its error (an error result)."""
    if status == RunStatus.COMPLETED and result is not None:
        if result.output is not None:
            content = orjson.dumps(result.output).decode()
        else:
            msg = result.final_assistant_message
            content = (msg.text if msg is not None else "") or ""
        is_error = False
    else:
        err = result.last_error if result is not None else None
        why = f": {err.code}: {err.message}" if err is not None else ""
        content, is_error = f"error: the child run {child_id} ended {status}{why}", True
    if len(content) > limits.MAX_TOOL_RESULT_CHARS:
        content = content[: limits.MAX_TOOL_RESULT_CHARS] + "…[truncated]"
    res = {"toolCallId": call_id, "name": "", "content": content, "isError": is_error}
    record: dict[str, Any] = {"state": "done", "child": child_id, "result": res}
    if result is not None and (spent := subtree_usage(result)) is not None:
        record["usage"] = spent.model_dump(mode="json", by_alias=True)
    return orjson.dumps(record)


def subtree_usage(result: RunResult) -> Usage | None:
    """What a run spent with its children's (usage + childrenUsage): what its parent's budget counts."""
    parts = [u for u in (result.usage, result.children_usage) if u is not None]
    return sum(parts[1:], parts[0]) if parts else None


async def deliver(parts: Partitions[Any], scripts: Scripts, part: keys.Partition, child_id: str) -> str:
    """The ended child's result into its parent's tools hash (child_result.lua): the verdict
    (recorded, resumed, duplicate, finished: the parent ended, missing: no such parent)."""
    fields = [F.PARENT_RUN, F.PARENT_CALL, F.STATUS, F.RESULT]
    h = await parts.call(part, lambda c: c.hmget(part.run(child_id), fields))
    parent, call, status, raw = (text(v) if v is not None else "" for v in h)
    if not parent:
        return "missing"
    ppart = await parts.locate(parent)
    if ppart is None:
        return "missing"
    result = RunResult.model_validate(payload_crypto.loads(raw)) if raw else None
    record = payload_crypto.active().seal_json(result_record(child_id, call, status, result))
    cr = ChildResult(parent, call, child_id, record)
    r = await run_script(parts, scripts.child_result, *scripts.framing.call(ppart, cr.keys(ppart), cr.argv()))
    return ChildResult.verdict(r).value


async def _abort(
    parts: Partitions[Any], scripts: Scripts, part: keys.Partition, run_id: str, reason: str
) -> str:
    call = Abort(run_id, reason, actor=actor_json(system("parent")))
    r = await run_script(parts, scripts.abort, *scripts.framing.call(part, call.keys(part), call.argv()))
    return Abort.verdict(r).value


async def cascade(parts: Partitions[Any], scripts: Scripts, part: keys.Partition, run_id: str) -> int:
    """Abort every child of the ended run's current round; how many were aborted or asked to stop."""
    raw, status = await parts.call(part, lambda c: c.hmget(part.run(run_id), [F.CHILDREN, F.STATUS]))
    children = orjson.loads(raw) if raw else []
    reason = orphan_reason(run_id, text(status))
    stopped = 0
    for child in children:
        cid = str(child.get("runId", ""))
        cpart = await parts.locate(cid) if cid else None
        if cpart is None:
            continue
        stopped += await _abort(parts, scripts, cpart, cid, reason) in ("aborted", "requested")
    return stopped


async def hand_off(
    parts: Partitions[Any], scripts: Scripts, part: keys.Partition, run_id: str
) -> dict[str, str]:
    """What the ended run owes (its handoff mark), done and cleared: {'deliver': verdict, 'cascade': n}.
    Raises (the mark stays, the reconciler tries again) when Redis fails on the way."""
    run = part.run(run_id)
    flags = text(await parts.call(part, lambda c: c.hget(run, F.HANDOFF)))
    done: dict[str, str] = {}
    if "d" in flags:
        done["deliver"] = await deliver(parts, scripts, part, run_id)
    if "a" in flags:
        done["cascade"] = str(await cascade(parts, scripts, part, run_id))

    async def clear(c: Any) -> None:
        async with c.pipeline(transaction=True) as pipe:
            pipe.hdel(run, F.HANDOFF)
            pipe.zrem(part.live, run_id)
            await pipe.execute()

    if flags:
        await parts.call(part, clear)
    return done


def orphan_reason(parent: str, status: str) -> str:
    """Why a child run ended aborted when its parent ended first: naming the parent unless the id
    its keys use is a scoped key, which its tenant does not know it by (the child's view names it)."""
    named = "" if parent.startswith(keys.SCOPED_PREFIX) else f" {parent}"
    return f"its parent run{named} ended {status}"


async def parent_status(parts: Partitions[Any], part: keys.Partition, run_id: str) -> tuple[str, str]:
    """A child run's parent id and the parent's status ('' where there is none)."""
    parent = text(await parts.call(part, lambda c: c.hget(part.run(run_id), F.PARENT_RUN)))
    ppart = await parts.locate(parent) if parent else None
    if ppart is None:
        return parent, ""
    return parent, text(await parts.call(ppart, lambda c: c.hget(ppart.run(parent), F.STATUS)))


async def child_runs(parts: Partitions[Any], tenant: str, parent_id: str) -> list[dict[str, str]]:
    """A parent's child runs, every round's, oldest first: [{runId, status, parentToolCallId}] (the
    ``parent`` listing index of every partition, one pipelined round trip per node, then their hashes)."""

    def ids(pipe: Any, p: keys.Partition) -> None:
        pipe.zrange(p.index_key(tenant, "parent", parent_id), 0, 999, withscores=True)

    found: list[tuple[float, str, keys.Partition]] = []
    for p, (members,) in zip(parts.parts, await parts.each(ids), strict=True):
        found += [(float(score), text(m), p) for m, score in members]
    found.sort()

    def read(p: keys.Partition, cid: str) -> Any:
        return lambda pipe: pipe.hmget(p.run(cid), [F.STATUS, F.PARENT_CALL])

    rows = await parts.pipelined([(p, read(p, cid)) for _, cid, p in found]) if found else []
    return [
        {"runId": cid, "status": text(vals[0]), "parentToolCallId": text(vals[1])}
        for (_, cid, _), (vals,) in zip(found, rows, strict=True)
        if vals[0] is not None
    ]
