"""What ``GET /v1/runs/{id}`` shows of a run waiting in the economy lane (``awaiting_model``): its
call's ``customId``, when it goes to the standard lane, and the provider batch it is in, as the
batcher left it (worker/economy/store.py): ``open`` (not in a batch yet), ``closed``, ``creating``,
``submitted`` (with the provider's batch id) or ``delivered``."""

from __future__ import annotations

from typing import Any

import orjson

from shared import endpoint_keys
from shared.fields import EconomyBatchField as EB
from shared.partitions import Partitions
from shared.replies import text

__all__ = ["economy_wait"]


async def economy_wait(parts: Partitions[Any], raw: str) -> dict[str, Any]:
    """The view of a parked run's wait (its run hash's modelWait); one round trip to its endpoint's slot."""
    w = orjson.loads(raw)
    cid, ep = str(w.get("customId") or ""), str(w.get("endpoint") or "")
    view: dict[str, Any] = {"customId": cid, "switchAt": w.get("switchAt")}
    if not ep or not cid:
        return view
    where = endpoint_keys.economy_where_key(ep)

    async def read(c: Any) -> tuple[str, list[Any]]:
        async with c.pipeline(transaction=False) as p:
            p.hget(where, cid)
            p.hexists(endpoint_keys.economy_requests_key(ep), cid)
            bid, pending = await p.execute()
        if bid is None:
            return ("open" if pending else "delivered"), []
        h = await c.hmget(endpoint_keys.economy_batch_key(ep, text(bid)), [EB.STATE, EB.PROVIDER_ID])
        return text(bid), list(h)

    got, h = await parts.call_key(where, read)
    if not h:
        view["batchState"] = got
        return view
    view["batchId"] = got
    view["batchState"] = text(h[0]) or "delivered"
    if h[1]:
        view["providerBatchId"] = text(h[1])
    return view
