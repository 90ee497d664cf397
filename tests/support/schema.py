"""The schema as the single-Redis suite sees it: one partition (the default on one Redis)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from redis.asyncio import Redis

from producer.scope import Scope
from shared import keys
from shared.fields import RunField
from shared.partitions import Partitions
from shared.scripts import text
from shared.settings import Settings

LAYOUT = keys.Layout(1)
K = LAYOUT.parts[0]  # every key of a run, session, queue or index of the suite's runs


def stored(settings: Settings, tenant: str, run_id: str) -> str:
    """The id a named tenant's run (or session) is kept under (producer.scope.Scope): its keys'."""
    return Scope.of(settings, tenant).key(run_id)


def parts_of(redis: Redis) -> Partitions[Any]:
    """The one partition on a client the test owns."""
    return Partitions.of_client(redis, 1)


def ids_where(
    layout: keys.Layout,
    prefix: str,
    n: int,
    where: Callable[[keys.Partition], bool],
    key: Callable[[str], str] = str,
) -> list[str]:
    """The first ``n`` ids ``prefix<k>`` (k = 0, 1, …) whose home partition satisfies ``where``;
    with ``key``, the home of the id their keys use (a named tenant's, producer.submission.Scope)."""
    out: list[str] = []
    k = 0
    while len(out) < n:
        if where(layout.home(key(cand := f"{prefix}{k}"))):
            out.append(cand)
        k += 1
    return out


async def tool_records(redis: Redis, run_id: str, part: keys.Partition = K) -> dict[str, dict[str, Any]]:
    """A run's tool records as acquire.lua answers them: the tools hash's, and the run's open claims
    (run field claims, commit.lua) for the calls without a record past their claim."""
    out = {text(k): orjson.loads(v) for k, v in (await redis.hgetall(part.tools(run_id))).items()}  # type: ignore[misc]
    raw = await redis.hget(part.run(run_id), RunField.CLAIMS)  # type: ignore[misc]
    for call_id, claim in (orjson.loads(raw) if raw else {}).items():
        if call_id not in out or out[call_id].get("state") == "pending":
            out[call_id] = claim
    return out
