"""An endpoint's economy requests and batches in Redis (keys.economy_*; one hash tag per endpoint,
so every script touches one slot). Every change but the request's first write is made under the
batcher's lease: a batcher that lost it writes nothing.

A request is written once (``enqueue``: a custom_id already there adds nothing), waits in its
model's open set, is moved into a batch by ``close``, and leaves with its batch once every reply of
the batch is with its run (``done``). A batch's record says how far it got: closed, creating (its
input uploaded), submitted (its provider id)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from shared import endpoint_keys, payload_crypto
from shared.calls.economy import LEASE_LOST, EconAdvance, EconClose, EconDone, EconEnqueue, EconLease
from shared.fields import EconomyBatchField as EB
from shared.fields import EconomyBatchState
from shared.functions import Script
from shared.scripts import Scripts

__all__ = ["BatchRecord", "CallKey", "EconomyStore", "LeaseLostError"]

CallKey = Callable[[str, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]  # Partitions.call_key


class LeaseLostError(Exception):
    """The batcher's lease is another worker's now: this one stops touching the endpoint."""


@dataclass(frozen=True, slots=True)
class BatchRecord:
    batch_id: str
    state: EconomyBatchState
    model: str
    ids: list[str]
    closed_at_ms: int
    upload_id: str
    provider_id: str
    polls: int
    cancelled: bool = False


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class EconomyStore:
    def __init__(self, scripts: Scripts, call_key: CallKey) -> None:
        self.scripts = scripts
        self.call_key = call_key

    async def _run(self, script: Script, ks: list[str], args: list[Any]) -> Any:
        return await self.call_key(ks[0], lambda c: script(keys=ks, args=args, client=c))

    async def enqueue(self, endpoint: str, model: str, custom_id: str, line: bytes, max_open: int) -> int:
        """1 written, 0 written before (nothing changes), -1 the model's open requests are full."""
        call = EconEnqueue(custom_id, line, max_open)
        return int(await self._run(self.scripts.econ_enqueue, call.keys(endpoint, model), call.argv()))

    async def lease(self, endpoint: str, holder: str, ttl_ms: int) -> bool:
        call = EconLease(holder, ttl_ms)
        return bool(await self._run(self.scripts.econ_lease, call.keys(endpoint), call.argv()))

    async def oldest_open(self, endpoint: str, model: str) -> tuple[int, int | None]:
        """(open requests of the model, when the oldest was written, ms)."""
        k = endpoint_keys.economy_open_key(endpoint, model)

        async def read(c: Any) -> tuple[int, int | None]:
            async with c.pipeline(transaction=False) as p:
                p.zcard(k)
                p.zrange(k, 0, 0, withscores=True)
                n, first = await p.execute()
            return int(n), int(first[0][1]) if first else None

        got: tuple[int, int | None] = await self.call_key(k, read)
        return got

    async def close(self, endpoint: str, model: str, holder: str, n: int) -> str | None:
        """A new batch of the model's oldest ``n`` open requests; its id (None: none open)."""
        seq = endpoint_keys.economy_seq_key(endpoint)
        number = await self.call_key(seq, lambda c: c.incr(seq))
        batch_id = f"{int(number):08d}"
        call = EconClose(holder, batch_id, n, model)
        got = int(await self._run(self.scripts.econ_close, call.keys(endpoint), call.argv()))
        if got == LEASE_LOST:
            raise LeaseLostError(endpoint)
        return batch_id if got else None

    async def advance(self, endpoint: str, batch_id: str, holder: str, fields: dict[EB, str | int]) -> bool:
        """Write the batch's next state; False: it was delivered already."""
        call = EconAdvance(holder, len(fields), tuple(x for f, v in fields.items() for x in (f.value, v)))
        got = int(await self._run(self.scripts.econ_advance, call.keys(endpoint, batch_id), call.argv()))
        if got == LEASE_LOST:
            raise LeaseLostError(endpoint)
        return got == 1

    async def done(self, endpoint: str, batch_id: str, holder: str) -> int:
        call = EconDone(holder, batch_id)
        got = int(await self._run(self.scripts.econ_done, call.keys(endpoint), call.argv()))
        if got == LEASE_LOST:
            raise LeaseLostError(endpoint)
        return got

    async def batches(self, endpoint: str, limit: int = 100) -> list[BatchRecord]:
        """The endpoint's undelivered batches, oldest first (at most ``limit``)."""
        bk = endpoint_keys.economy_batches_key(endpoint)

        async def read(c: Any) -> list[tuple[str, dict[Any, Any]]]:
            ids = [_s(i) for i in await c.zrange(bk, 0, limit - 1)]
            async with c.pipeline(transaction=False) as p:
                for i in ids:
                    p.hgetall(endpoint_keys.economy_batch_key(endpoint, i))
                rows = await p.execute()
            return list(zip(ids, rows, strict=True))

        out: list[BatchRecord] = []
        for bid, row in await self.call_key(bk, read):
            h = {_s(k): _s(v) for k, v in row.items()}
            if not h:
                continue
            out.append(
                BatchRecord(
                    bid,
                    EconomyBatchState(h[EB.STATE]),
                    h.get(EB.MODEL, ""),
                    list(orjson.loads(h.get(EB.IDS, "[]"))),
                    int(h.get(EB.CLOSED_AT, "0")),
                    h.get(EB.FILE, ""),
                    h.get(EB.PROVIDER_ID, ""),
                    int(h.get(EB.POLLS, "0")),
                    h.get(EB.CANCELLED) == "1",
                )
            )
        return out

    async def withdraw(self, endpoint: str, model: str, custom_id: str) -> None:
        """A request whose run sent the call to the standard lane: out of the open set (never put in
        a batch), its line gone (a closed batch not yet sent leaves it out), marked as left (a sent
        batch all of whose requests left is cancelled). One transaction on the endpoint's slot."""
        requests = endpoint_keys.economy_requests_key(endpoint)

        async def write(c: Any) -> None:
            async with c.pipeline(transaction=True) as p:
                p.zrem(endpoint_keys.economy_open_key(endpoint, model), custom_id)
                p.hdel(requests, custom_id)
                p.sadd(endpoint_keys.economy_left_key(endpoint), custom_id)
                await p.execute()

        await self.call_key(requests, write)

    async def all_left(self, endpoint: str, ids: list[str]) -> bool:
        """Whether every one of ``ids`` was withdrawn (``withdraw``)."""
        k = endpoint_keys.economy_left_key(endpoint)
        got = await self.call_key(k, lambda c: c.smismember(k, ids)) if ids else []
        return bool(got) and all(int(x) for x in got)

    async def forget_left(self, endpoint: str, ids: list[str]) -> None:
        k = endpoint_keys.economy_left_key(endpoint)
        if ids:
            await self.call_key(k, lambda c: c.srem(k, *ids))

    async def lines(self, endpoint: str, ids: list[str]) -> list[bytes]:
        """The request lines of ``ids`` (one missing: not sent; it was answered and removed)."""
        k = endpoint_keys.economy_requests_key(endpoint)
        raw = await self.call_key(k, lambda c: c.hmget(k, ids)) if ids else []
        return [payload_crypto.open_bytes(r) for r in raw if r is not None]
