"""Rate keys (RunInput.rate) at submission: each run with one asks its key's home partition when it
may start (rate_slots.lua), in one call per partition for all of a request's runs there; a run the
key has no room for now is submitted with that start as its runAt (scheduled, its waitingFor naming
the key). The key's starts live apart from the runs, so the runs of one key may live anywhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from producer.prepared import Prepared
from producer.submission import SubmissionError
from shared import keys
from shared.calls.limits import RateSlots
from shared.replies import text
from shared.script_sending import Parts, run_many
from shared.scripts import Scripts

__all__ = ["rate_full", "with_starts"]


def rate_full(prep: Prepared) -> SubmissionError:
    key = prep.run.rate.key if prep.run.rate is not None else ""
    return SubmissionError(
        "rate_full",
        f"rate.key {key!r} has given as many starts ahead as a key may hold (AGENTMILL_KEY_MAX_WAITING); "
        "retry later",
        status=429,
        field="rate.key",
        retry_after_s=1,
    )


async def with_starts(
    parts: Parts, scripts: Scripts, tenant: str, most: int, preps: Sequence[Prepared]
) -> list[Prepared | SubmissionError]:
    """``preps`` with the starts their rate keys give them (Prepared.rate_at; unchanged without a
    key or when they may start now), or 429 ``rate_full`` for a run whose key holds ``most`` starts
    already. One round trip per node."""
    out: list[Prepared | SubmissionError] = list(preps)
    by_part: dict[int, list[int]] = {}
    for i, p in enumerate(preps):
        if p.run.rate is not None:
            by_part.setdefault(parts.layout.home(keys.rate_home(p.run.rate.key)).index, []).append(i)
    if not by_part:
        return out
    calls = []
    for index, items in by_part.items():
        part = parts.layout.parts[index]
        rate_keys: list[str] = []
        runs: list[str] = []
        for i in items:
            r = preps[i].run.rate
            assert r is not None
            rate_keys.append(r.key)
            runs += [preps[i].run_id, str(r.limit), str(r.period_s * 1000)]
        call = RateSlots(tenant, tuple(rate_keys), most, tuple(runs))
        calls.append((part, call.keys(part), call.argv()))
    replies = await run_many(parts, scripts.rate_slots, calls)
    for items, reply in zip(by_part.values(), replies, strict=True):
        for i, at in zip(items, reply, strict=True):
            start = int(text(at))
            if start < 0:
                out[i] = rate_full(preps[i])
            elif start > 0:
                out[i] = replace(preps[i], rate_at=start)
    return out
