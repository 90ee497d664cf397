"""Tenant quotas at submission, over the partitions: submitsPerSecond taken once per request from
the tenant's token bucket at its home partition (admit_rate.lua: bursts up to Quota.submit_burst, at
least a full batch; a refusal says when the bucket will hold the request), then maxActive on each partition that receives runs
(admit_tenant.lua), allowed there the quota less the tenant's runs on the other partitions (those
counted already and this request's new ones). A refusal anywhere uncounts what the others admitted,
gives the bucket its tokens back and refuses the whole request. Partitions are admitted one
call each, not in one transaction: two requests of a tenant at once may pass its quota by a little.

One run submitted alone (``admit_one``, ``settle_one``) is admitted by the script that creates it
(admit_submit.lua: the bucket when it lives on the run's partition, then maxActive there, then the
run), after one round trip with more than one partition (the tenant's runs counted on each, and the
bucket's token at home when home is another partition, given back if the script refuses). Nothing
is taken or counted for a refusal, and the run is counted only once created.

Before all of it, a tenant whose quota disables it (``"disabled": true``) is refused with 403
``tenant_disabled``, and a tenant with a day budget (tokensPerDay, costUsdPerDay) whose UTC day is spent
(its settled usage at the limit, or a model call of the day refused for want of budget:
worker/adapters/budgets.py) is refused with 429 ``budget_exhausted`` and a
Retry-After to the next UTC midnight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from producer.submission import SubmissionError
from shared import keys
from shared.calls.admissions import AdmitRate, AdmitRateVerdict, AdmitTenant, AdmitTenantVerdict
from shared.calls.submission import SubmitVerdict
from shared.clock import ms_to_next_utc_day, now_ms, utc_day
from shared.fields import BudgetField
from shared.quotas import ACTIVE_GRACE_MS, NANO_USD, Quota
from shared.replies import text
from shared.script_sending import Call, Parts, run_many, run_script
from shared.scripts import Scripts

__all__ = [
    "ADMIT_GRACE_MS", "OneAdmission", "admit", "admit_one", "check_budget", "check_enabled", "settle_one",
    "spent_budget",
]  # fmt: skip

ADMIT_GRACE_MS = ACTIVE_GRACE_MS  # a counted run whose hash never appeared stops counting after this


async def admit(
    parts: Parts,
    scripts: Scripts,
    ttl_ms: int,
    tenant: str,
    placed: Mapping[int, Sequence[str]],
    quota: Quota | None,
) -> None:
    """Count the runs (run ids by partition index) against the tenant's quotas, or raise 429."""
    n = sum(len(ids) for ids in placed.values())
    if quota is not None and n > 0:
        check_enabled(tenant, quota)
    if quota is not None and n > 0 and quota.budgeted:
        await check_budget(parts, tenant, quota)
    if quota is None or n == 0 or (quota.max_active == 0 and quota.submits_per_second == 0):
        return
    home = parts.home(tenant)
    now = now_ms()

    async def rate(refund: bool) -> tuple[AdmitRateVerdict, int]:
        call = AdmitRate(tenant, n, quota.submits_per_second, quota.burst, "1" if refund else "")
        k, a = scripts.framing.frame(home, call.keys(home), call.argv())
        reply = await run_script(parts, scripts.admit_rate, home, k, a)
        return AdmitRateVerdict(text(reply[0])), int(reply[1])

    async def no_rate() -> tuple[AdmitRateVerdict, int]:
        return AdmitRateVerdict.OK, 0

    # The rate once, at the tenant's home; meanwhile what the tenant has on every partition.
    limited = quota.submits_per_second > 0
    (verdict, wait_ms), (active, new) = await asyncio.gather(
        rate(False) if limited else no_rate(), _counted(parts, tenant, placed, quota)
    )
    if verdict is AdmitRateVerdict.RATE_LIMITED:
        raise _rate_limited(quota, n, wait_ms)
    if quota.max_active == 0:
        return
    targets = [p for p in parts.parts if placed.get(p.index)]
    admitted: list[keys.Partition] = []
    for attempt in range(2):
        held = [a + b for a, b in zip(active, new, strict=True)]  # counted, and coming now
        calls = [
            _admit_call(scripts, p, AdmitTenant(tenant, now, quota.max_active - (sum(held) - held[p.index]),
                                                ttl_ms, ADMIT_GRACE_MS, tuple(placed[p.index])))
            for p in targets
        ]  # fmt: skip
        replies = await run_many(parts, scripts.admit_tenant, calls)
        was_full = [AdmitTenant.verdict(r) is AdmitTenantVerdict.FULL for r in replies]
        full = [(p, int(text(r[1]))) for p, r, f in zip(targets, replies, was_full, strict=True) if f]
        admitted += [p for p, f in zip(targets, was_full, strict=True) if not f]
        if not full:
            return
        p, here = full[0]
        if attempt == 0 and sum(active) - active[p.index] > 0:
            # Runs counted on the other partitions may have ended: forget those (as a full partition
            # does for itself) and ask again with the fresh counts (the runs admitted now included).
            active = await _forget_ended(parts, scripts, ttl_ms, tenant)
            new = [0 if q in admitted else new[q.index] for q in parts.parts]
            targets = [q for q, _ in full]
            continue
        await _give_back(parts, tenant, now, {q.index: placed[q.index] for q in admitted})
        if limited:
            await rate(True)
        raise _quota_exceeded(quota, here + sum(active) - active[p.index])


@dataclass(frozen=True, slots=True)
class OneAdmission:
    """What admit_submit.lua is told of one run's tenant quotas on the run's partition (AdmitSubmit),
    and what the first round trip found: the tenant's runs counted per partition; whether the
    tenant's bucket gave its token already (its home is another partition)."""

    room: int | str  # maxActive for this partition ('' = none)
    per_second: int  # the bucket taken in the script (0: not there)
    burst: int
    active: tuple[int, ...]
    rate_taken: bool


async def admit_one(
    parts: Parts, scripts: Scripts, tenant: str, part: keys.Partition, quota: Quota | None
) -> OneAdmission | None:
    """The admission of one run going to ``part`` up to the script that creates it: 403/429 for a
    disabled tenant or a spent budget; with more than one partition, the tenant's runs counted on
    each and, when the tenant's home is not ``part``, its bucket's token (429 rate_limited), in one
    round trip (none with one partition). None: no quota to count against."""
    if quota is not None:
        check_enabled(tenant, quota)
        if quota.budgeted:
            await check_budget(parts, tenant, quota)
    if quota is None or (quota.max_active == 0 and quota.submits_per_second == 0):
        return None
    home, limited = parts.home(tenant), quota.submits_per_second > 0
    away = limited and home is not part

    async def rate() -> tuple[AdmitRateVerdict, int]:
        call = AdmitRate(tenant, 1, quota.submits_per_second, quota.burst)
        k, a = scripts.framing.frame(home, call.keys(home), call.argv())
        reply = await run_script(parts, scripts.admit_rate, home, k, a)
        return AdmitRateVerdict(text(reply[0])), int(reply[1])

    async def no_rate() -> tuple[AdmitRateVerdict, int]:
        return AdmitRateVerdict.OK, 0

    (verdict, wait_ms), (active, _) = await asyncio.gather(
        rate() if away else no_rate(), _counted(parts, tenant, {}, quota)
    )
    if verdict is AdmitRateVerdict.RATE_LIMITED:
        raise _rate_limited(quota, 1, wait_ms)
    room = "" if quota.max_active == 0 else quota.max_active - (sum(active) - active[part.index])
    per_second = quota.submits_per_second if limited and not away else 0
    return OneAdmission(room, per_second, quota.burst, tuple(active), away)


async def settle_one(
    parts: Parts,
    scripts: Scripts,
    ttl_ms: int,
    tenant: str,
    part: keys.Partition,
    quota: Quota,
    admission: OneAdmission,
    send: Callable[[OneAdmission], Awaitable[Sequence[Any]]],
) -> Sequence[Any]:
    """``send`` the run's admit_submit call (``admission`` of ``admit_one``) and answer its reply
    when it created the run or answered for it (submit_one's verdicts), else 429: its bucket was
    empty, or the tenant is at maxActive (asked once more with fresh counts when runs counted on
    other partitions may have ended; the token taken at home, if any, given back)."""
    for attempt in range(2):
        reply = await send(admission)
        verdict = SubmitVerdict(text(reply[0]))
        if verdict is SubmitVerdict.RATE_LIMITED:
            raise _rate_limited(quota, 1, int(reply[1]))
        if verdict is not SubmitVerdict.QUOTA_EXCEEDED:
            return reply
        here, active = int(text(reply[1])), admission.active
        others = sum(active) - active[part.index]
        if attempt == 1 or others == 0:
            break
        active = tuple(await _forget_ended(parts, scripts, ttl_ms, tenant))
        room = quota.max_active - (sum(active) - active[part.index])
        admission = replace(admission, room=room, active=active)
    if admission.rate_taken:
        home = parts.home(tenant)
        call = AdmitRate(tenant, 1, quota.submits_per_second, quota.burst, "1")
        k, a = scripts.framing.frame(home, call.keys(home), call.argv())
        await run_script(parts, scripts.admit_rate, home, k, a)
    raise _quota_exceeded(quota, here + others)


def _rate_limited(quota: Quota, n: int, wait_ms: int) -> SubmissionError:
    wait_s = max(1, -(-wait_ms // 1000))
    return SubmissionError(
        "rate_limited",
        f"this tenant may submit {quota.submits_per_second} runs per second, in bursts of up to "
        f"{quota.burst}; {n} more can be taken in {wait_s} s",
        status=429,
        retry_after_s=wait_s,
    )


def _quota_exceeded(quota: Quota, held: int) -> SubmissionError:
    return SubmissionError(
        "quota_exceeded",
        f"this tenant has {held} queued and running runs and may have {quota.max_active}; retry when "
        "some have finished",
        status=429,
        retry_after_s=5,
    )


def check_enabled(tenant: str, quota: Quota) -> None:
    """Raise 403 tenant_disabled when the tenant's quota disables it (``"disabled": true``)."""
    if quota.disabled:
        raise SubmissionError(
            "tenant_disabled",
            f'tenant {tenant!r} is disabled ("disabled": true in its AGENTMILL_TENANT_QUOTAS entry): it may '
            "submit no runs and create no schedules, and its schedules are held, until an operator enables it",
            status=403,
        )


async def check_budget(parts: Parts, tenant: str, quota: Quota) -> None:
    """Raise 429 budget_exhausted when the tenant's UTC day is spent (tokensPerDay, costUsdPerDay)."""
    now = now_ms()
    spent = await spent_budget(parts, tenant, quota, now)
    if spent is None:
        return
    wait_s = max(1, -(-ms_to_next_utc_day(now) // 1000))
    raise SubmissionError(
        "budget_exhausted",
        f"this tenant's budget for {utc_day(now)} (UTC) is spent: it {spent}; submit again after midnight UTC",
        status=429,
        retry_after_s=wait_s,
    )


async def spent_budget(parts: Parts, tenant: str, quota: Quota, now: int) -> str | None:
    """How the tenant's day budget of ``now``'s UTC day is spent (``has spent 120 of its 100
    tokensPerDay``), from the day's counters the budget scripts keep (worker/adapters/budgets.py); None
    while it is not (or the tenant has no day budget)."""
    if not quota.budgeted:
        return None
    home = parts.home(tenant)
    key = home.tenant_budget(tenant, utc_day(now))

    async def read(c: Any) -> Any:
        return await c.hmget(key, [BudgetField.SPENT_TOKENS, BudgetField.SPENT_COST, BudgetField.REFUSED])

    tokens, nano, refused = (int(text(v) or 0) if v is not None else 0 for v in await parts.call(home, read))
    cost_limit = round(quota.cost_usd_per_day * NANO_USD)
    if quota.tokens_per_day and tokens >= quota.tokens_per_day:
        return f"has spent {tokens} of its {quota.tokens_per_day} tokensPerDay"
    if cost_limit and nano >= cost_limit:
        return f"has spent ${nano / NANO_USD:.6f} of its ${quota.cost_usd_per_day:g} costUsdPerDay"
    if refused:
        return (
            f"could not afford {refused} model call(s) (spent {tokens} tokens, ${nano / NANO_USD:.6f}; "
            f"tokensPerDay {quota.tokens_per_day or 'none'}, costUsdPerDay {quota.cost_usd_per_day or 'none'})"
        )
    return None


async def _counted(
    parts: Parts, tenant: str, placed: Mapping[int, Sequence[str]], quota: Quota
) -> tuple[list[int], list[int]]:
    """Per partition: the tenant's counted runs, and how many of the runs going there are not
    counted yet. Not read with one partition (its script sees it all), nor without maxActive."""
    zeros = [0] * parts.layout.count
    if quota.max_active == 0 or parts.layout.count == 1:
        return zeros, list(zeros)

    def op(pipe: Any, p: keys.Partition) -> None:
        pipe.zcard(p.tenant_active(tenant))
        if placed.get(p.index):
            pipe.zmscore(p.tenant_active(tenant), list(placed[p.index]))

    replies = await parts.each(op)
    active = [int(r[0]) for r in replies]
    new = [sum(1 for s in r[1] if s is None) if len(r) > 1 else 0 for r in replies]
    return active, new


async def _forget_ended(parts: Parts, scripts: Scripts, ttl_ms: int, tenant: str) -> list[int]:
    """admit_tenant with nothing to add and room for nothing, on every partition: it forgets the
    ended runs it counts and answers how many are left."""
    now = now_ms()
    calls = [
        _admit_call(scripts, p, AdmitTenant(tenant, now, -1, ttl_ms, ADMIT_GRACE_MS, ())) for p in parts.parts
    ]
    return [int(text(r[1])) for r in await run_many(parts, scripts.admit_tenant, calls)]


def _admit_call(scripts: Scripts, part: keys.Partition, call: AdmitTenant) -> Call:
    return scripts.framing.call(part, call.keys(part), call.argv())


async def _give_back(parts: Parts, tenant: str, now: int, admitted: dict[int, Sequence[str]]) -> None:
    """Uncount the runs this request added on the partitions that admitted them (those scored
    ``now``; a run counted before keeps its place)."""
    if not admitted:
        return
    where = [parts.parts[i] for i in admitted]

    def added(pipe: Any, p: keys.Partition) -> None:
        pipe.zrangebyscore(p.tenant_active(tenant), now, now)

    replies = await parts.each(added, where)
    ours = {
        p.index: set(admitted[p.index]) & {text(m) for m in r[0]} for p, r in zip(where, replies, strict=True)
    }

    def remove(pipe: Any, p: keys.Partition) -> None:
        pipe.zrem(p.tenant_active(tenant), *ours[p.index])

    await parts.each(remove, [p for p in where if ours[p.index]])
