"""The economy lane's settings (docs/operations.md#the-economy-lane): when a batch of economy
requests is closed and sent, how its status is polled, how many requests may wait. ``Settings``
(shared/settings.py) holds them with the rest."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["EconomySettings"]


class EconomySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMILL_", extra="ignore", populate_by_name=True)

    economy_batcher: bool = Field(
        default=True,
        description="each worker competes for the batcher lease of every provider endpoint an economy "
        "profile uses (one holder pool-wide); `false`: this worker never sends batches",
    )
    economy_batch_requests: int = Field(
        default=1000,
        ge=1,
        le=5000,
        description="a batch is closed and sent once it holds this many requests …",
    )
    economy_batch_age_s: float = Field(
        default=60.0, gt=0, description="… or once its oldest request has waited this long"
    )
    economy_max_open: int = Field(
        default=100_000,
        ge=1,
        description="requests of one endpoint and model waiting for a batch at most; a model call past "
        "it is made on the standard lane (a `lane_changed` event, reason `economy_full`)",
    )
    economy_poll_min_s: float = Field(
        default=2.0, gt=0, description="the first wait before a sent batch's status is polled"
    )
    economy_poll_max_s: float = Field(
        default=60.0, gt=0, description="the longest wait between polls (the waits double up to it)"
    )
    economy_lease_ms: int = Field(
        default=15_000,
        ge=1000,
        description="the batcher lease; a batcher that dies holding it is taken over this long after",
    )
