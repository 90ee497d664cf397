"""Completion webhooks: POST a finished run's RunResult to its webhook URL.

Signed with ``X-Agentmill-Signature: sha256=<HMAC of the body>`` under AGENTMILL_WEBHOOK_SECRET,
identified by a stable ``X-Agentmill-Delivery`` id so receivers can deduplicate (a run's: the id its
keys use, ``tsc_…`` for a named tenant's run; a batch's: ``bat_…``, Scope.batch_delivery), retried with
backoff, and never repeated once a delivery is recorded as successful. Without a secret, deliveries
go out unsigned and say so (``X-Agentmill-Unsigned: true``, no signature header): a signature under
an empty key would look valid and be forgeable by anyone.

Every delivery goes through the SSRF guard of HTTP tools (shared/netguard.py), reads at most
MAX_WEBHOOK_RESPONSE_BYTES of the answer and ends within DELIVERY_DEADLINE_S. Deliveries run
concurrently, at most ``CONCURRENCY`` at once and ``PER_HOST`` per receiver host, so one slow
receiver holds a few slots for a few seconds and never the others' deliveries.

Each partition keeps its own deliveries (its webhook list, due set and delivery states); a run's
delivery comes from its partition's list. A batch's share that finishes queues a delivery
``{batch}<share key>`` on its partition; the batch is delivered once every share has finished, by
the one delivery that wins the batch's ``done`` marker at the batch's home partition, which posts the
summed counters (producer.listing.batch_view) with the batch's delivery id; the other deliveries of
the batch are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from agentmill_client import limits
from agentmill_client.models import usable_url
from producer.batch_shares import merge_batch, read_batch
from producer.listing import batch_body, batch_delivery_key
from producer.scope import Scope
from shared import backoff, index_keys, keys, payload_crypto
from shared.calls.results import ClaimWebhooks
from shared.clock import now_ms
from shared.fields import RunField
from shared.netguard import BlockedAddressError, ResponseTooLargeError, guarded_client, guarded_request
from shared.profiles import RetryConfig
from shared.replies import text
from shared.script_sending import Parts, as_partitions, run_many
from shared.scripts import Scripts
from shared.settings import Settings

__all__ = [
    "CONCURRENCY",
    "DELIVERY_DEADLINE_S",
    "HOST_BUSY_DELAY_MS",
    "LEASE_MS",
    "PER_HOST",
    "RETRY",
    "Deliverer",
    "Delivery",
    "backoff_ms",
    "deliver_forever",
    "deliver_once",
    "signature",
    "signing_headers",
]

log = logging.getLogger("agentmill.webhooks")
LEASE_MS = 60_000
DELIVERY_DEADLINE_S = 10.0
CONCURRENCY = 32
PER_HOST = 4
HOST_BUSY_DELAY_MS = 500
Delivery = tuple[keys.Partition, str]  # a delivery id (a run id, or a batch share's) and its partition


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signing_headers(secret: str | None, body: bytes) -> dict[str, str]:
    if not secret:
        return {"X-Agentmill-Unsigned": "true"}
    return {"X-Agentmill-Signature": signature(secret, body)}


# Deliveries are retried after 1 s, doubling, at most 5 minutes apart; no jitter.
RETRY = RetryConfig(base_delay_ms=1_000, max_delay_ms=300_000, jitter=0.0)


def backoff_ms(attempt: int) -> int:
    return backoff.backoff_ms(attempt, RETRY)


class Deliverer:
    """Delivers due webhooks with bounded concurrency, overall and per receiver host."""

    def __init__(
        self,
        redis: Redis | Parts,
        settings: Settings,
        http: httpx.AsyncClient,
        *,
        concurrency: int = CONCURRENCY,
        per_host: int = PER_HOST,
        deadline_s: float = DELIVERY_DEADLINE_S,
        in_outage: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.parts = as_partitions(redis, settings)
        # The process's RedisWatch.in_outage: True when a failed claim belongs to a Redis outage,
        # logged once there (shared/outage_log.py); it then goes to the debug log, not a warning a turn
        self.in_outage = in_outage or (lambda exc: False)
        self.redis = self.parts.client(self.parts.parts[0])
        self.settings = settings
        self.http = http
        self.scripts = Scripts.for_settings(self.redis, settings)
        self.concurrency = concurrency
        self.per_host = per_host
        self.deadline_s = deadline_s
        self.allow = [h.strip() for h in settings.webhook_allow_hosts.split(",") if h.strip()]
        self.busy: Counter[str] = Counter()
        self.tasks: set[asyncio.Task[None]] = set()
        self._turn = 0  # which partitions claim one more this time (limit spread over them)

    async def claim(self, limit: int) -> list[Delivery]:
        """Due deliveries of every partition, ``limit`` in all (spread over the partitions, in
        turns), one pipelined round trip per node."""
        now, parts = now_ms(), self.parts.parts
        n = len(parts)
        share = [limit // n + (1 if (i - self._turn) % n < limit % n else 0) for i in range(n)]
        self._turn = (self._turn + limit % n) % n
        calls = [
            (
                p,
                *self.scripts.framing.frame(
                    p, (c := ClaimWebhooks(now, LEASE_MS, share[p.index])).keys(p), c.argv()
                ),
            )
            for p in parts
            if share[p.index] > 0
        ]
        replies = await run_many(self.parts, self.scripts.claim_webhooks, calls)
        return [(c[0], text(d)) for c, due in zip(calls, replies, strict=True) for d in due]

    def start(self, delivery: Delivery) -> None:
        task = asyncio.create_task(self.deliver(delivery))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        try:
            while not stop.is_set():
                free = self.concurrency - len(self.tasks)
                due: list[Delivery] = []
                if free > 0:
                    try:
                        due = await self.claim(free)
                    except (RedisError, OSError) as exc:
                        level = logging.DEBUG if self.in_outage(exc) else logging.WARNING
                        log.log(level, "webhook delivery paused: %s", exc)
                for d in due:
                    self.start(d)
                if due and len(self.tasks) < self.concurrency:
                    continue
                stopped = asyncio.ensure_future(stop.wait())
                await asyncio.wait(
                    {stopped, *self.tasks}, timeout=interval_s, return_when=asyncio.FIRST_COMPLETED
                )
                stopped.cancel()
        finally:
            for t in list(self.tasks):
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def deliver(self, delivery: Delivery) -> None:
        run_id = delivery[1]
        try:
            await self._deliver(*delivery)
        except (RedisError, OSError) as exc:  # the claim's lease brings it back later
            log.warning("webhook of run %s not recorded: %s", run_id, exc)
        except Exception:
            log.exception("webhook of run %s failed unexpectedly", run_id)

    async def _batch(self, part: keys.Partition, share_key: str) -> tuple[str, bytes | None, Any]:
        """(delivery id, body, url) of a batch share's delivery: the summed batch, when every share
        has finished and this delivery holds the batch's ``done`` marker; else no body (dropped)."""
        settings = self.settings
        raw: dict[Any, Any] = await self.parts.call(part, lambda c: c.hgetall(share_key))  # type: ignore[arg-type,return-value]
        share = {text(k): text(v) for k, v in raw.items()}
        tenant, batch_id = share.get("tenant", ""), share.get("batchId", "")
        delivery_id = Scope.of(settings, tenant).batch_delivery(batch_id)  # names no tenant, no key
        if not share or self.parts.layout.count == 1:  # one share: the batch itself
            return delivery_id, batch_body(share) if share else None, share.get("webhook")
        shares = [h for h in await read_batch(self.parts, tenant, batch_id) if h]
        home = self.parts.home(batch_id)
        h = merge_batch(shares)
        if h is None or not all(s.get("finishedAt") for s in shares):
            return delivery_id, None, None  # a share still runs: its own delivery comes when it finishes
        mine = index_keys.BATCH_DELIVERY + share_key
        done = home.batch_done(tenant, batch_id)

        async def won(c: Redis) -> bool:
            async with c.pipeline(transaction=False) as pipe:
                pipe.set(done, mine, nx=True, ex=settings.retention_s)
                pipe.get(done)
                _, holder = await pipe.execute()
            return text(holder) == mine

        if not await self.parts.call(home, won):
            return delivery_id, None, None
        return delivery_id, batch_body(h), h.get("webhook")

    async def _deliver(self, part: keys.Partition, run_id: str) -> None:
        settings = self.settings
        due_key = part.webhooks_due
        state_key = part.webhook(run_id)

        def on(fn: Callable[[Redis], Any]) -> Awaitable[Any]:
            return self.parts.call(part, fn)  # following a failover, as every call to a partition

        # A run deleted meanwhile (its tombstone, written with the deletion) keeps no delivery state
        gone_key = part.gone(run_id)

        async def forget(c: Redis) -> None:
            await c.delete(state_key)
            await c.zrem(due_key, run_id)

        state = {text(k): text(v) for k, v in (await on(lambda c: c.hgetall(state_key))).items()}
        if state.get("delivered") == "1":
            await on(lambda c: c.zrem(due_key, run_id))
            return
        shown = run_id  # the delivery id the receiver sees
        batch = batch_delivery_key(run_id)
        if batch is not None:  # a batch's share ended: the batch's counters go to its webhook, once
            shown, body, url_raw = await self._batch(part, batch)
        else:
            url_raw, body, client_id, client_session = await on(
                lambda c: c.hmget(
                    part.run(run_id),
                    [RunField.WEBHOOK, RunField.RESULT, RunField.CLIENT_ID, RunField.CLIENT_SESSION],
                )
            )
            body = payload_crypto.open_bytes(body)  # the receiver gets it as the tenant reads it
            if body and (client_id or client_session):  # kept under its tenant's keys: as its client knows it
                result = orjson.loads(body)
                if client_id:
                    result["runId"] = text(client_id)
                if client_session and result.get("sessionId"):
                    result["sessionId"] = text(client_session)
                body = orjson.dumps(result)
        if not url_raw or not body:
            await on(lambda c: c.zrem(due_key, run_id))
            return
        url = text(url_raw)
        host = ""
        with contextlib.suppress(ValueError):
            host = (urlsplit(url).hostname or "").lower()
        if self.busy[host] >= self.per_host:  # that receiver already has its share: a little later
            await on(lambda c: c.zadd(due_key, {run_id: now_ms() + HOST_BUSY_DELAY_MS}))
            return
        attempt = int(state.get("attempts") or 0) + 1
        headers = {
            "Content-Type": "application/json",
            "X-Agentmill-Delivery": shown,
            "X-Agentmill-Attempt": str(attempt),
            **signing_headers(settings.webhook_secret, body),
        }
        error = ""
        self.busy[host] += 1
        try:
            usable_url(url, "webhook")  # one stored before submissions checked it
            resp = await guarded_request(
                self.http, "POST", url, allow_hosts=self.allow, content=body, headers=headers,
                timeout=self.deadline_s, deadline_s=self.deadline_s,
                max_bytes=limits.MAX_WEBHOOK_RESPONSE_BYTES,
            )  # fmt: skip
            if 200 <= resp.status_code < 300:

                async def delivered(c: Redis) -> bool:
                    async with c.pipeline(transaction=True) as pipe:
                        pipe.hset(
                            state_key,
                            mapping={"delivered": "1", "attempts": attempt, "deliveredAt": now_ms()},
                        )
                        pipe.expire(state_key, settings.retention_s)
                        pipe.zrem(due_key, run_id)
                        pipe.exists(gone_key)
                        return bool((await pipe.execute())[-1])

                if await on(delivered):
                    await on(forget)
                return
            error = f"HTTP {resp.status_code}"
        except (BlockedAddressError, ValueError) as exc:  # refused or unusable URL: never retried
            error, attempt = f"refused: {exc}", settings.webhook_max_attempts
        except ResponseTooLargeError as exc:
            error = str(exc)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            self.busy[host] -= 1
            if self.busy[host] <= 0:
                del self.busy[host]
        given_up = attempt >= settings.webhook_max_attempts

        async def failed(c: Redis) -> bool:
            async with c.pipeline(transaction=True) as pipe:
                pipe.hset(state_key, mapping={"attempts": attempt, "lastError": error[:500]})
                pipe.expire(state_key, settings.retention_s)
                if given_up:
                    pipe.hset(state_key, "failed", "1")
                    pipe.zrem(due_key, run_id)
                else:
                    pipe.zadd(due_key, {run_id: now_ms() + backoff_ms(attempt)})
                pipe.exists(gone_key)
                return bool((await pipe.execute())[-1])

        if await on(failed):  # deleted while its delivery was under way: no state, no retry of it
            await on(forget)
            return
        if given_up:
            log.warning("webhook of run %s given up after %d attempts: %s", run_id, attempt, error)


async def deliver_once(
    redis: Redis | Parts, settings: Settings, http: httpx.AsyncClient, *, limit: int = 20
) -> int:
    """Claim due deliveries and attempt each once (concurrently); returns how many were claimed."""
    d = Deliverer(redis, settings, http)
    due = await d.claim(limit)
    await asyncio.gather(*(d.deliver(one) for one in due))
    return len(due)


async def deliver_forever(
    redis: Redis | Parts,
    settings: Settings,
    stop: asyncio.Event,
    *,
    interval_s: float = 0.5,
    http: httpx.AsyncClient | None = None,
    in_outage: Callable[[BaseException], bool] | None = None,
) -> None:
    if not settings.webhook_secret:
        log.warning(
            "AGENTMILL_WEBHOOK_SECRET is not set: webhooks are sent unsigned (X-Agentmill-Unsigned: true)"
        )
    own = http is None
    client = http or guarded_client(max_connections=CONCURRENCY)
    try:
        await Deliverer(redis, settings, client, in_outage=in_outage).run(stop, interval_s)
    finally:
        if own:
            await client.aclose()
