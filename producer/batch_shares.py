"""A batch over the partitions: each partition that received some of its runs keeps its share's
hash (keys.Partition.batch), counted by the scripts there. The batch is the sum of its shares, and
finished once every share is; its webhook fires once, from the delivery that wins the batch's
``done`` marker at the batch's home partition (producer.webhooks)."""

from __future__ import annotations

from typing import Any

from agentmill_client.models import RunStatus
from shared import keys
from shared.calls.batches import BatchClose
from shared.fields import BatchField
from shared.replies import text
from shared.script_sending import Parts, run_many
from shared.scripts import Scripts

__all__ = ["batch_gate", "close_batch", "merge_batch", "read_batch"]

_COUNTERS = ("total", "done", *(s.value for s in RunStatus), BatchField.INPUT_TOKENS, BatchField.OUTPUT_TOKENS,
             BatchField.ESTIMATED_RUNS, BatchField.CACHE_READ_TOKENS, BatchField.CACHE_WRITE_TOKENS,
             BatchField.ECONOMY_INPUT_TOKENS, BatchField.ECONOMY_OUTPUT_TOKENS, BatchField.ECONOMY_COST,
             BatchField.ECONOMY_CACHE_READ_TOKENS, BatchField.ECONOMY_CACHE_WRITE_TOKENS)  # fmt: skip


def merge_batch(shares: list[dict[str, str]]) -> dict[str, str] | None:
    """The batch hash its shares add up to (None without any): counters summed, created at the
    first share's creation, open while any share is, finished when the last share finished."""
    shares = [h for h in shares if h]
    if len(shares) <= 1:
        return shares[0] if shares else None
    out = {
        f: v for h in reversed(shares) for f, v in h.items() if f in ("batchId", "tenant", "webhook") and v
    }
    for f in _COUNTERS:
        out[f] = str(sum(int(h.get(f) or 0) for h in shares))
    out["createdAt"] = str(min(int(h.get("createdAt") or 0) for h in shares))
    if costs := [float(c) for h in shares if (c := h.get(BatchField.COST_USD))]:
        out[BatchField.COST_USD] = repr(sum(costs))
    if any(h.get("open") == "1" for h in shares):
        out["open"] = "1"
    if all(h.get("finishedAt") for h in shares):
        out["finishedAt"] = str(max(int(h["finishedAt"]) for h in shares))
    return out


async def read_batch(parts: Parts, tenant: str, batch_id: str) -> list[dict[str, str]]:
    """Every partition's share of the batch (empty where it has none), one round trip per node."""

    def op(pipe: Any, p: keys.Partition) -> None:
        pipe.hgetall(p.batch(tenant, batch_id))

    return [{text(k): text(v) for k, v in r[0].items()} for r in await parts.each(op)]


async def batch_gate(parts: Parts, tenant: str, batch_id: str, webhook: str) -> tuple[frozenset[int], str]:
    """Before a part of a batch is sent (more than one partition; with one, the scripts decide):
    the partitions that refuse its new runs, and the batch webhook (the request's, else the one a
    share has). A finished batch (every share finished) takes no new runs on any partition; the
    scripts of the partitions holding a share still answer for the runs it has. A batch whose
    shares are not all finished takes new runs everywhere: its finished shares are opened again (a
    later BATCH_CLOSE, or their runs ending, finishes them again). Every share gets the webhook,
    whichever finishes last queues the batch's delivery."""

    def op(pipe: Any, p: keys.Partition) -> None:
        pipe.hmget(p.batch(tenant, batch_id), ["createdAt", "finishedAt", "webhook"])

    rows = [(p, r[0]) for p, r in zip(parts.parts, await parts.each(op), strict=True) if r[0][0] is not None]
    webhook = webhook or next((text(r[2]) for _, r in rows if r[2]), "")
    ended = [p for p, r in rows if r[1] is not None]
    if rows and len(ended) == len(rows):
        return frozenset(p.index for p in parts.parts if p not in ended), webhook
    fix = {p.index: (r[1] is not None, bool(webhook) and text(r[2]) != webhook) for p, r in rows}

    def mend(pipe: Any, p: keys.Partition) -> None:
        reopen, hook = fix[p.index]
        if reopen:
            pipe.hdel(p.batch(tenant, batch_id), "finishedAt")
        if hook:
            pipe.hset(p.batch(tenant, batch_id), "webhook", webhook)

    if any(a or b for a, b in fix.values()):
        await parts.each(mend, [p for p, _ in rows if any(fix[p.index])])
    return frozenset(), webhook


async def close_batch(parts: Parts, scripts: Scripts, tenant: str, batch_id: str) -> None:
    """batch_close.lua on every partition (a partition without a share answers missing)."""
    call = BatchClose(tenant, batch_id)
    calls = [scripts.framing.call(p, call.keys(p), call.argv()) for p in parts.parts]
    await run_many(parts, scripts.batch_close, calls)
