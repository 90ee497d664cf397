"""A run's checkpoint as its readers load it (the worker resuming it, a retry or fork from Redis or
from the archive): its JSON, with what it was written without put back into its state: the run's
configuration (AGENTMILL_CHECKPOINT_CONFIG=apart keeps it once a run, in the run hash's config field)
and its transcript (AGENTMILL_CHECKPOINT_TRANSCRIPT=apart keeps it in a key of its own, its messages'
JSON comma-joined, each commit appending the new ones)."""

from __future__ import annotations

from typing import Any

from shared import payload_crypto

__all__ = ["load"]


def load(
    raw: bytes | str | None, config: bytes | str | None = None, transcript: bytes | str | None = None
) -> dict[str, Any] | None:
    """``raw``: the run hash's ckpt (RunField.CKPT); ``config``: its config (RunField.CONFIG), '' or
    None when the checkpoint carries its own; ``transcript``: the transcript key's value (the
    archive record's RunField.TRANSCRIPT), '' or None when the checkpoint carries its own or the
    transcript is empty. None without a checkpoint."""
    if not raw:
        return None
    ck: dict[str, Any] = payload_crypto.loads(raw)
    state = ck.get("state")
    if isinstance(state, dict):
        if config and state.get("config") is None:
            state["config"] = payload_crypto.loads(config)
        if "transcript" in state and state["transcript"] is None:
            body = transcript.encode() if isinstance(transcript, str) else (transcript or b"")
            state["transcript"] = payload_crypto.loads(b"[%b]" % body)
    return ck
