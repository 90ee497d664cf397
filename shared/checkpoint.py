"""A run's checkpoint as its readers load it (the worker resuming it, a retry or fork from Redis or
from the archive): its JSON, with the run's configuration put back into its state when it was written
without it (AGENTMILL_CHECKPOINT_CONFIG=apart keeps it once a run, in the run hash's config field)."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["load"]


def load(raw: bytes | str | None, config: bytes | str | None = None) -> dict[str, Any] | None:
    """``raw``: the run hash's ckpt (RunField.CKPT); ``config``: its config (RunField.CONFIG), '' or
    None when the checkpoint carries its own. None without a checkpoint."""
    if not raw:
        return None
    ck: dict[str, Any] = orjson.loads(raw)
    state = ck.get("state")
    if config and isinstance(state, dict) and state.get("config") is None:
        state["config"] = orjson.loads(config)
    return ck
