"""The runs' side of the economy lane on Redis: what a run's model-call effect reads and writes
(``RedisRunEconomy``, the run's ``EconomyPort``), and the batcher's delivery of an answer to its run
(``Deliveries``: model_reply.lua keeps it with the run once and puts a parked run back on the queue)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

from shared import keys, payload_crypto
from shared.calls.steps import ModelReply
from shared.fields import RunField as F
from shared.partitions import Partitions
from shared.replies import text
from shared.scripts import Scripts
from worker.adapters.budgets import TenantBudgets
from worker.core.economy_answer import EconomyAnswer
from worker.economy.provider import BatchReply
from worker.economy.store import EconomyStore

__all__ = ["Deliveries", "RedisRunEconomy", "custom_id", "parse_custom_id"]


def custom_id(run_id: str, index: int) -> str:
    """A model call's id in a provider batch: ``<runId>:<modelCallIndex>`` (run ids hold no ``:``)."""
    return f"{run_id}:{index}"


def parse_custom_id(cid: str) -> tuple[str, int] | None:
    run_id, sep, index = cid.rpartition(":")
    return (run_id, int(index)) if sep and run_id and index.isdigit() else None


class RedisRunEconomy:
    def __init__(
        self,
        parts: Partitions[Any],
        part: keys.Partition,
        run_id: str,
        store: EconomyStore,
        max_open: int,
        budgets: TenantBudgets | None = None,
    ) -> None:
        self.parts, self.part, self.run_id, self.store, self.max_open = parts, part, run_id, store, max_open
        self.budgets = budgets

    async def answer(self, index: int) -> EconomyAnswer:
        k = self.part.run(self.run_id)
        fields = (F.MODEL_REPLY_INDEX, F.MODEL_REPLY, F.MODEL_STANDARD)
        got, reply, standard = await self.parts.call(self.part, lambda c: c.hmget(k, fields))
        mine = got is not None and text(got) == str(index)
        opened = payload_crypto.open_bytes(reply) if mine else None
        return EconomyAnswer(opened, standard is not None and text(standard) == str(index))

    async def enqueue(self, endpoint: str, model: str, custom_id: str, line: bytes) -> int:
        return await self.store.enqueue(endpoint, model, custom_id, line, self.max_open)

    async def withdraw(self, endpoint: str, model: str, custom_id: str) -> None:
        await self.store.withdraw(endpoint, model, custom_id)

    async def spent(self, tenant: str, custom_id: str, tokens: int, cost_usd: float | None) -> None:
        if self.budgets is not None and self.budgets.limited(tenant):
            await self.budgets.spent(tenant, f"{custom_id}.economy", tokens, cost_usd)


class Deliveries:
    """``deliver(custom_id, reply)`` for the batcher: one script on the run's partition. Counts the
    verdicts (recorded, resumed, duplicate, late, finished, unknown_run) in ``counts``."""

    def __init__(
        self, parts: Partitions[Any], scripts: Scripts, on_verdict: Callable[[str], None] = lambda v: None
    ) -> None:
        self.parts, self.scripts, self.on_verdict = parts, scripts, on_verdict
        self.counts: Counter[str] = Counter()

    async def __call__(self, cid: str, reply: BatchReply) -> None:
        parsed = parse_custom_id(cid)
        part = await self.parts.locate(parsed[0]) if parsed else None
        if parsed is None or part is None:
            self.counts["unknown_run"] += 1
            self.on_verdict("unknown_run")
            return
        run_id, index = parsed
        sealed = payload_crypto.active().seal_json(orjson.dumps(reply.to_json()))
        call = ModelReply(run_id, index, sealed)
        k, a = self.scripts.framing.frame(part, call.keys(part), call.argv())
        verdict = ModelReply.verdict(
            await self.parts.call(part, lambda c: self.scripts.model_reply(keys=k, args=a, client=c))
        )
        self.counts[verdict.value] += 1
        self.on_verdict(verdict.value)
