"""The batcher of one provider endpoint: closes its models' open requests into batches (at
``batch_requests`` requests, or once the oldest has waited ``batch_age_s``), sends each batch, polls
its status with a doubling wait, and hands every answer to ``deliver`` (which records it with its
run, once, whatever how often it is called). One batcher per endpoint holds the lease pool-wide;
any worker may take it over when its holder dies.

Each state is in Redis before the next is begun, so a batcher killed anywhere leaves its successor
work it can finish without sending a request twice or losing one:

- closed: the requests are chosen; a successor uploads them (an upload whose id was lost is an
  unused file at the provider, not a request sent; a provider taking the requests in its create
  uploads nothing);
- creating: the upload's id is kept; whether the batch was created is unknown, so a successor
  first looks for it by its tag (``BatchProvider.find``) and creates it only if it is not there;
- submitted: the provider's id is kept; a successor polls it;
- delivered: every answer went to ``deliver`` before the batch's record and requests go.

A run whose call goes to the standard lane while it waits withdraws its request
(``EconomyStore.withdraw``): an open request is never batched, a closed batch's unsent line is left
out, and a sent batch all of whose requests left is cancelled at the provider (``_cancel``; the
providers cancel whole batches only, so one still holding a waiting request runs on).

Failpoints (worker/process/failpoints.py): ``economy_after_upload``, ``economy_after_creating``,
``economy_after_create``, ``economy_after_submitted``, ``economy_after_deliver``,
``economy_after_results``: the worker dies right after that step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from shared.fields import EconomyBatchField as EB
from shared.fields import EconomyBatchState as ES
from worker.economy.provider import BatchProvider, BatchReply, LostCreate
from worker.economy.store import BatchRecord, EconomyStore, LeaseLostError

__all__ = ["Batcher", "BatcherConfig", "Deliver", "poll_wait_s"]

log = logging.getLogger("agentmill.economy")

Deliver = Callable[[str, BatchReply], Awaitable[None]]  # (custom_id, answer); idempotent
MISSING = "missing: the batch's results hold no answer for it"


@dataclass(frozen=True, slots=True)
class BatcherConfig:
    batch_requests: int = 1000
    batch_age_s: float = 60.0
    poll_min_s: float = 2.0
    poll_max_s: float = 60.0
    lease_ms: int = 15_000


def poll_wait_s(polls: int, cfg: BatcherConfig) -> float:
    """The wait before the next status poll of a batch polled ``polls`` times: doubling, capped."""
    return float(min(cfg.poll_max_s, cfg.poll_min_s * 2 ** min(polls, 30)))


class Batcher:
    def __init__(
        self,
        store: EconomyStore,
        endpoint: str,
        models: list[str],
        provider: BatchProvider,
        deliver: Deliver,
        holder: str,
        cfg: BatcherConfig,
        hit: Callable[[str], None] = lambda name: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.endpoint, self.models = store, endpoint, list(models)
        self.provider, self.deliver, self.holder, self.cfg = provider, deliver, holder, cfg
        self.hit, self.clock = hit, clock
        self.next_poll: dict[str, float] = {}  # batch id -> when to poll it next (this holder's view)
        self.held = False
        self.delivered = 0  # answers handed to deliver (counting repeats after a takeover)
        self.cancelled = 0  # batches this holder asked the provider to cancel
        # what the last pass saw (for the gauges): model -> (open requests, oldest's age s); batches by state
        self.open_seen: dict[str, tuple[int, float]] = {}
        self.batches_seen: dict[str, int] = {}

    def tag(self, batch_id: str) -> str:
        return f"{self.endpoint}:{batch_id}"

    async def step(self) -> bool:
        """One pass: take or renew the lease, close what is due, move every batch on. Whether this
        worker holds the lease."""
        self.held = await self.store.lease(self.endpoint, self.holder, self.cfg.lease_ms)
        if not self.held:
            self.next_poll.clear()
            self.open_seen, self.batches_seen = {}, {}
            return False
        # Kept while the pass runs: an upload or a download may take longer than the lease.
        keeper = asyncio.create_task(self._keep())
        try:
            for model in self.models:
                await self._close_due(model)
            batches = await self.store.batches(self.endpoint)
            self.batches_seen = {s.value: sum(1 for b in batches if b.state == s) for s in ES}
            for b in batches:
                await self._move(b)
        except LeaseLostError:
            self.held = False
            self.next_poll.clear()
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        return self.held

    async def _keep(self) -> None:
        """Renew the lease every third of it; once another holds it, every write of this batcher
        is refused (LeaseLostError) and the pass stops at its next one."""
        while True:
            await asyncio.sleep(self.cfg.lease_ms / 3000)
            with contextlib.suppress(Exception):  # a missed renewal: the next one, or the lease's loss
                await self.store.lease(self.endpoint, self.holder, self.cfg.lease_ms)

    async def _close_due(self, model: str) -> None:
        n, oldest = await self.store.oldest_open(self.endpoint, model)
        now_ms = self.clock() * 1000
        while n >= self.cfg.batch_requests or (
            n and oldest is not None and now_ms - oldest >= self.cfg.batch_age_s * 1000
        ):
            if await self.store.close(self.endpoint, model, self.holder, self.cfg.batch_requests) is None:
                return
            n -= self.cfg.batch_requests
        n, oldest = await self.store.oldest_open(self.endpoint, model)
        self.open_seen[model] = (n, max(0.0, (now_ms - oldest) / 1000) if oldest is not None else 0.0)

    async def _move(self, b: BatchRecord) -> None:
        recovered = b.state == ES.CREATING  # read so from Redis: a predecessor may have created it
        lines: list[bytes] | None = None
        if b.state == ES.CLOSED:
            lines = await self.store.lines(self.endpoint, b.ids) if self.provider.uploads else []
            if self.provider.uploads and not lines:  # every request of it left: nothing to send
                await self._forget(b)
                return
            upload = await self.provider.upload(lines, self.tag(b.batch_id))
            self.hit("economy_after_upload")
            if not await self.store.advance(
                self.endpoint, b.batch_id, self.holder, {EB.STATE: ES.CREATING, EB.FILE: upload}
            ):
                return
            self.hit("economy_after_creating")
            b = replace(b, state=ES.CREATING, upload_id=upload)
        if b.state == ES.CREATING:
            if not self.provider.uploads:  # the requests go with the create
                lines = await self.store.lines(self.endpoint, b.ids)
                if not lines:  # every request of it left: nothing to send
                    await self._forget(b)
                    return
            pid = await self._find(b, len(lines) if lines else len(b.ids)) if recovered else None
            if pid is None:
                pid = await self.provider.create(b.upload_id, self.tag(b.batch_id), lines or [])
            self.hit("economy_after_create")
            await self.store.advance(
                self.endpoint, b.batch_id, self.holder, {EB.STATE: ES.SUBMITTED, EB.PROVIDER_ID: pid}
            )
            self.hit("economy_after_submitted")
            self.next_poll[b.batch_id] = self.clock() + poll_wait_s(0, self.cfg)
            return
        now = self.clock()
        if now < self.next_poll.get(b.batch_id, 0.0):
            return
        status = await self.provider.status(b.provider_id)
        if not status.done:
            if not b.cancelled and await self.store.all_left(self.endpoint, b.ids):
                await self._cancel(b)
            polls = b.polls + 1
            await self.store.advance(self.endpoint, b.batch_id, self.holder, {EB.POLLS: polls})
            self.next_poll[b.batch_id] = now + poll_wait_s(polls, self.cfg)
            return
        results = await self.provider.results(b.provider_id, b.ids)
        self.hit("economy_after_results")
        whole = results.get("*")
        for cid in b.ids:
            await self.deliver(cid, results.get(cid) or whole or BatchReply(error=MISSING))
            self.delivered += 1
            self.hit("economy_after_deliver")
        await self._forget(b)
        log.info(
            "economy batch %s (%s) delivered: %d requests, %s",
            b.batch_id,
            b.provider_id,
            len(b.ids),
            status.state,
        )

    async def _find(self, b: BatchRecord, requests: int) -> str | None:
        others = await self.store.batches(self.endpoint)
        known = frozenset(x.provider_id for x in others if x.provider_id and x.batch_id != b.batch_id)
        return await self.provider.find(self.tag(b.batch_id), LostCreate(b.closed_at_ms, requests, known))

    async def _cancel(self, b: BatchRecord) -> None:
        """Every request of the batch went to the standard lane: the provider is asked to stop it
        (OpenAI and Anthropic cancel whole batches, never one request of one). It is polled on
        until it ends, its answers then delivered as any batch's (each run discards them)."""
        await self.provider.cancel(b.provider_id)
        await self.store.advance(self.endpoint, b.batch_id, self.holder, {EB.CANCELLED: "1"})
        self.cancelled += 1
        log.info("economy batch %s (%s): every request left; cancelled", b.batch_id, b.provider_id)

    async def _forget(self, b: BatchRecord) -> None:
        await self.store.done(self.endpoint, b.batch_id, self.holder)
        await self.store.forget_left(self.endpoint, b.ids)
        self.next_poll.pop(b.batch_id, None)
