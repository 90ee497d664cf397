"""``GET /v1/usage``'s answer: a tenant's usage by UTC day, agent and lane (shared by the API, which
documents it in OpenAPI, and the client's ``usage()``). Attributes snake_case, the JSON camelCase."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentmill_client.base import Answer

__all__ = ["LANES_DOC", "UsageAnswer", "UsageDay", "UsageTotals"]


class UsageTotals(Answer):
    input_tokens: int = Field(default=0, description="the prompts' tokens, their cached parts included")
    output_tokens: int = 0
    cost_usd: float = Field(default=0.0, description="by the models' prices (unpriced models add nothing)")
    cache_read_tokens: int = Field(default=0, description="of input_tokens, read from a prompt cache")
    cache_write_tokens: int = Field(default=0, description="of input_tokens, written to a prompt cache")
    runs: int = Field(default=0, description="runs that ended")


LANES_DOC = (
    "the totals split by lane: economy (the model calls a provider batch answered; runs submitted with"
    ' lane "economy") and standard (the rest)'
)


class UsageDay(Answer):
    day: str = Field(description="a UTC day, YYYY-MM-DD")
    agents: dict[str, UsageTotals] = Field(description="by agent (profile); only agents with runs that day")
    total: UsageTotals
    lanes: dict[Literal["standard", "economy"], UsageTotals] = Field(
        default_factory=dict, description=LANES_DOC
    )


class UsageAnswer(Answer):
    """``GET /v1/usage``: the tenant's usage by UTC day and agent, counted when each run ends (a run
    counts on the day it ended, with all its model calls)."""

    from_: str = Field(alias="from")
    to: str
    days: list[UsageDay] = Field(description="every day of the range, oldest first")
    total: UsageTotals
    lanes: dict[Literal["standard", "economy"], UsageTotals] = Field(
        default_factory=dict, description=LANES_DOC
    )
