"""What a fork starts from: the pure machine's state at the forked seq (worker.machine.origin_state),
given to the producer's Restorer by the processes that fork runs (the API, the CLI)."""

from __future__ import annotations

from typing import Any

from agentmill_client.models import Message
from shared.origin import Origin
from worker.machine import origin_state

__all__ = ["state_of"]


def state_of(o: Origin, run_key: str, input_messages: list[Message], now_ms: int) -> dict[str, Any] | None:
    """``producer.restore.StateOf``: the state ``o`` names as checkpoint JSON, None for a run that
    never started."""
    state = origin_state(o, run_key, input_messages, now_ms)
    return None if state is None else state.model_dump(mode="json", by_alias=True)
