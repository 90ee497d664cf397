"""The bench's modules imported in a test process without what importing them changes for the rest
of the suite (bench.plumbing turns the dev profiles on for the bench's workers)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["bench_modules"]


def bench_modules(*names: str) -> tuple[ModuleType, ...]:
    """``bench.<name>`` for each name, with AGENTMILL_DEV_PROFILES as it was before."""
    before = os.environ.get("AGENTMILL_DEV_PROFILES")
    try:
        return tuple(importlib.import_module(f"bench.{n}") for n in names)
    finally:
        if before is None:
            os.environ.pop("AGENTMILL_DEV_PROFILES", None)
