"""Completion webhooks: POST a finished run's RunResult to its webhook URL.

Signed with ``X-Agentmill-Signature: sha256=<HMAC of the body>``, identified by a stable
``X-Agentmill-Delivery: <runId>`` so receivers can deduplicate, retried with backoff, and never
repeated once a delivery is recorded as successful. The SSRF guard of HTTP tools applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import time

import httpx
from redis.asyncio import Redis
from redis.exceptions import RedisError

from shared import keys
from shared.models import usable_url
from shared.scripts import Scripts, text
from shared.settings import Settings
from worker.netguard import BlockedAddressError, guarded_request

log = logging.getLogger("agentmill.webhooks")
LEASE_MS = 60_000


def signature(secret: str | None, body: bytes) -> str:
    return "sha256=" + hmac.new((secret or "").encode(), body, hashlib.sha256).hexdigest()


def backoff_ms(attempt: int) -> int:
    return min(300_000, 1_000 * (1 << max(0, attempt - 1)))


async def deliver_once(redis: Redis, settings: Settings, http: httpx.AsyncClient, *, limit: int = 20) -> int:
    """Claim due deliveries and attempt each once; returns how many were attempted."""
    scripts = Scripts(redis)
    now = int(time.time() * 1000)
    due = await scripts.claim_webhooks(keys=[keys.WEBHOOKS, keys.WEBHOOKS_DUE], args=[now, LEASE_MS, limit])
    allow = [h.strip() for h in settings.webhook_allow_hosts.split(",") if h.strip()]
    await asyncio.gather(*(_deliver(redis, settings, http, text(rid), allow) for rid in due))
    return len(due)


async def _deliver(
    redis: Redis, settings: Settings, http: httpx.AsyncClient, run_id: str, allow: list[str]
) -> None:
    state_key = keys.webhook_key(run_id)
    state = {text(k): text(v) for k, v in (await redis.hgetall(state_key)).items()}  # type: ignore[misc]
    if state.get("delivered") == "1":
        await redis.zrem(keys.WEBHOOKS_DUE, run_id)
        return
    url_raw, body = await redis.hmget(keys.run_key(run_id), ["webhook", "result"])  # type: ignore[misc]
    if not url_raw or not body:
        await redis.zrem(keys.WEBHOOKS_DUE, run_id)
        return
    url = text(url_raw)
    attempt = int(state.get("attempts") or 0) + 1
    headers = {
        "Content-Type": "application/json",
        "X-Agentmill-Delivery": run_id,
        "X-Agentmill-Attempt": str(attempt),
        "X-Agentmill-Signature": signature(settings.webhook_secret, body),
    }
    error = ""
    try:
        usable_url(url, "webhook")  # one stored before submissions checked it
        resp = await guarded_request(
            http, "POST", url, allow_hosts=allow, content=body, headers=headers, timeout=10.0
        )
        await resp.aclose()
        if 200 <= resp.status_code < 300:
            async with redis.pipeline(transaction=True) as pipe:
                pipe.hset(
                    state_key,
                    mapping={"delivered": "1", "attempts": attempt, "deliveredAt": int(time.time() * 1000)},
                )
                pipe.expire(state_key, settings.retention_s)
                pipe.zrem(keys.WEBHOOKS_DUE, run_id)
                await pipe.execute()
            return
        error = f"HTTP {resp.status_code}"
    except (BlockedAddressError, ValueError) as exc:  # refused or unusable URL: never retried
        error, attempt = f"refused: {exc}", settings.webhook_max_attempts
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # one bad delivery must not stop the others: record it, back off
        log.exception("webhook of run %s failed unexpectedly", run_id)
        error = f"{type(exc).__name__}: {exc}"
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(state_key, mapping={"attempts": attempt, "lastError": error[:500]})
        pipe.expire(state_key, settings.retention_s)
        if attempt >= settings.webhook_max_attempts:
            pipe.hset(state_key, "failed", "1")
            pipe.zrem(keys.WEBHOOKS_DUE, run_id)
            log.warning("webhook of run %s given up after %d attempts: %s", run_id, attempt, error)
        else:
            pipe.zadd(keys.WEBHOOKS_DUE, {run_id: int(time.time() * 1000) + backoff_ms(attempt)})
        await pipe.execute()


async def deliver_forever(
    redis: Redis, settings: Settings, stop: asyncio.Event, *, interval_s: float = 0.5
) -> None:
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=20)) as http:
        while not stop.is_set():
            try:
                n = await deliver_once(redis, settings, http)
            except (RedisError, OSError) as exc:
                log.warning("webhook delivery paused: %s", exc)
                n = 0
            except Exception:  # the loop outlives any single bad sweep
                log.exception("webhook delivery sweep failed")
                n = 0
            if n == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval_s)
