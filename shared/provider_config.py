"""A profile's model providers: how each is reached (kind, endpoint, key, timeouts, pool-wide
limits), what its calls cost, which failures move a call along a fallback chain, and which providers
may take the economy lane. shared/profiles.py's ``AgentProfile`` holds them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentmill_client.models import Model
from shared.anthropic_config import ANTHROPIC_BASE_URL, ANTHROPIC_MAX_TOKENS, ThinkingConfig
from shared.price_table import pricing_of
from shared.prices import Pricing

__all__ = [
    "FALLBACK_CLASSES",
    "MAX_PROVIDERS",
    "PROVIDER_NAME",
    "EconomyConfig",
    "FallbackClass",
    "ProviderConfig",
    "unpriced_message",
]


def unpriced_message(field: str, provider: ProviderConfig) -> str:
    """Why a cost budget (``field``) cannot apply to runs of ``provider``'s model."""
    return (
        f"{field}: the model {provider.model_name!r} has no price (the price table does not know it and "
        "the profile's provider.pricing gives none), so its cost cannot be counted; give the provider "
        'a pricing ({"inputPerMTok": …, "outputPerMTok": …}) or drop the cost budget'
    )


# What makes a model call move on to the next provider of a profile's ``providers`` (worker/machine/fallback.py).
FallbackClass = Literal["overloaded", "rate_limited", "server_error", "timeout", "context_too_long"]


FALLBACK_CLASSES: tuple[FallbackClass, ...] = (
    "overloaded",
    "rate_limited",
    "server_error",
    "timeout",
    "context_too_long",
)


MAX_PROVIDERS = 4  # a fallback chain's length (the primary and three fallbacks)


PROVIDER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$"  # a metric label: short, no free text


class ProviderConfig(Model):
    kind: Literal["scripted", "openai", "anthropic"] = "scripted"
    # In a fallback chain (``providers``), the name events and metrics give this provider; unset:
    # its position ("0" the primary, "1" the first fallback …).
    name: str | None = Field(default=None, pattern=PROVIDER_NAME)
    # The model's context window in tokens, as declared: a context_too_long fallback goes only to a
    # provider whose window is declared larger than the one that refused.
    context_window: int | None = Field(default=None, ge=1)
    # scripted
    mode: Literal["calculator", "script"] = "script"
    script: list[dict[str, Any]] | None = None
    chunk_chars: int = 8
    # scripted: report cache reads and writes as Anthropic's prompt caching would (worker/models/scripted.py)
    report_cache: bool = False
    # openai-compatible
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    api_key_file: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    # "auto" | "none" | "required", or the object {"type": "function", "function": {"name": …}}
    tool_choice: str | dict[str, Any] | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    # How a run's responseFormat is sent: "openai" (response_format json_schema, OpenAI's shape),
    # "json_object_schema" ({"type": "json_object", "schema": …}: llama-cpp-python, Anyscale) or
    # "none" (not sent). The answer is validated by agentmill in every case.
    response_format_style: Literal["openai", "json_object_schema", "none"] = "openai"
    # How a user message's image parts are sent: "parts" (OpenAI's list of text and image_url parts)
    # or "placeholder" (the content as one string, each image as "[image]"): for text-only models
    # behind servers that render a list of parts into the prompt as text (llama-cpp-python's
    # chatml templates put the list's repr, base64 data and all, into the prompt).
    image_parts: Literal["parts", "placeholder"] = "parts"
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 120.0
    # Pool-wide limits for this provider's endpoint (baseUrl), enforced across every worker through
    # Redis (worker/adapters/limiter.py); a run waits for capacity. None = no such limit.
    max_concurrent: int | None = Field(default=None, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    # USD per million tokens, for usage.costUsd; None: the price table's (shared/price_table.py)
    pricing: Pricing | None = None
    # openai: send prompt_cache_key (the run's session id, else its run id) so that OpenAI routes a
    # run's calls to the same prompt cache. Off by default: other servers may refuse the field.
    prompt_cache_key: bool = False
    # anthropic: cache_control breakpoints on the tools, the system prompt and the transcript
    prompt_caching: bool = True
    thinking: ThinkingConfig | None = None  # anthropic: extended thinking

    @model_validator(mode="before")
    @classmethod
    def _anthropic_defaults(cls, data: Any) -> Any:
        """An anthropic provider's baseUrl and maxTokens when the profile leaves them out."""
        if isinstance(data, dict) and data.get("kind") == "anthropic":
            data = dict(data)
            if data.get("baseUrl", data.get("base_url")) is None:
                data["baseUrl"] = ANTHROPIC_BASE_URL
            if data.get("maxTokens", data.get("max_tokens")) is None:
                data["maxTokens"] = ANTHROPIC_MAX_TOKENS
        return data

    def prices(self) -> Pricing | None:
        """The prices its calls cost by: its own ``pricing``, else the table's; None: unpriced."""
        return pricing_of(self.kind, self.model, self.base_url, self.pricing)

    @property
    def model_name(self) -> str:
        """The model as metrics name it: ``model``, else the provider kind (scripted)."""
        return self.model or self.kind

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(value, dict):
            fn = value.get("function")
            if value.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                raise ValueError(
                    'toolChoice as an object must be {"type": "function", "function": {"name": …}}'
                )
        return value


class EconomyConfig(Model):
    """The economy lane (docs/api.md#the-economy-lane): whether a run of the profile may ask for it,
    and on which of its providers (their names, as in ``providers``; None: each of kind openai or
    anthropic, the kinds with a batch endpoint)."""

    enabled: bool = False
    providers: list[str] | None = Field(default=None, max_length=MAX_PROVIDERS)
    deadline_ms: int = Field(default=24 * 3_600_000, ge=60_000, le=7 * 24 * 3_600_000)  # from its start
    # kept before the deadline for the standard lane: a call still in a batch then is sent there
    standard_time_ms: int = Field(default=600_000, ge=0, le=24 * 3_600_000)

    def allows(self, name: str, kind: str) -> bool:
        """Whether a call on the provider named ``name`` (of ``kind``) may go to the economy lane."""
        if not self.enabled or kind not in ("openai", "anthropic"):  # the kinds with a batch endpoint
            return False
        return self.providers is None or name in self.providers
