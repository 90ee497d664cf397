"""What the figures were measured on: the machine, the Redis and the Python, the date and the load."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any

from redis.asyncio import Redis


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


async def describe(r: Redis) -> dict[str, Any]:
    """The machine as the bench starts; ``load_end`` is added when it ends."""
    info = await r.info("server")
    return {
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "cores": os.cpu_count(),
        "cpu_model": cpu_model(),
        "redis_version": str(info["redis_version"]),
        "python_version": platform.python_version(),
        "load_start": load_average(),
    }
