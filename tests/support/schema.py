"""The schema as the single-Redis suite sees it: one partition (the default on one Redis)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from shared import keys
from shared.partitions import Partitions

LAYOUT = keys.Layout(1)
K = LAYOUT.parts[0]  # every key of a run, session, queue or index of the suite's runs


def parts_of(redis: Redis) -> Partitions[Any]:
    """The one partition on a client the test owns."""
    return Partitions.of_client(redis, 1)
