"""What a profile's anthropic provider takes beyond the openai kind's settings (shared/provider_config.py)."""

from __future__ import annotations

from pydantic import Field

from agentmill_client.models import Model

__all__ = ["ANTHROPIC_BASE_URL", "ANTHROPIC_MAX_TOKENS", "ThinkingConfig"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
# an anthropic provider's maxTokens when the profile sets none (the API needs one)
ANTHROPIC_MAX_TOKENS = 4_096


class ThinkingConfig(Model):
    """Extended thinking (anthropic): up to ``budgetTokens`` of thinking before each answer."""

    budget_tokens: int = Field(ge=1_024)
