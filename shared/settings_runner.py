"""How a worker's runs commit their steps (``AGENTMILL_MODEL_COMMIT``, ``AGENTMILL_STEP_HOLD_MS``). ``Settings``
(shared/settings.py) holds it with the rest."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["RunnerSettings"]


class RunnerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    model_commit: Literal["behind", "awaited"] = Field(
        default="awaited",
        description="a step whose only effect is a model call with something to commit (a retry's or fork's "
        "start; a new run's start commits nothing before its first call, its claim wrote its opening event, "
        "nor does a run resumed by its client's tool results when their answer wrote the results' event): "
        "`behind` sends the step's commit and the model request together, so the call does not wait a Redis "
        "round trip; the commit's reply is still awaited before the run writes again, "
        "publishes a delta, holds budget, writes an economy request, runs a tool or parks, and a refused "
        "commit (the run fenced or deleted) stops the run and cancels the call unanswered; `awaited`: "
        "the commit's reply first, then the call",
    )
    step_hold_ms: int = Field(
        default=50,
        ge=0,
        le=10_000,
        description="how long a model reply's commit may wait for its tool calls when every one of them "
        "is declared `sideEffects: false`: reply and results then go out in one commit (a crash in "
        "between asks the model again and may run those calls again); `0`: every step commits alone",
    )
