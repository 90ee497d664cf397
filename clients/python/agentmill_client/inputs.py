"""What a caller sends (seed: agentloop-runinput-runevent-design): a run's input with its parts and
their checks, and, while the run goes, client tools' results and approval decisions."""

from __future__ import annotations

import math
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson
from pydantic import Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from agentmill_client import limits
from agentmill_client.base import Model
from agentmill_client.ids import ID_PATTERN
from agentmill_client.messages import Message

__all__ = [
    "ApprovalDecision",
    "Budget",
    "ClientTool",
    "ClientToolResult",
    "ConcurrencyKey",
    "Debounce",
    "JsonSchemaFormat",
    "LoopLimits",
    "MultitaskStrategy",
    "RateKey",
    "ResponseFormat",
    "RunInput",
    "ToolPolicy",
    "run_at_ms",
    "usable_url",
]


class ClientTool(Model):
    """A tool the caller executes (seed: external tools): the run publishes each call as a
    ``tool_call`` event with ``execution: "client"``, waits without holding a worker, and resumes
    when the caller posts the result to ``POST /v1/runs/{id}/tool-results``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(default="", max_length=4096)
    # A JSON Schema (2020-12): the server checks it against the metaschema and its bounds when the
    # run is submitted (a 422 naming the field), not here: that check costs milliseconds per subschema.
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    execution: Literal["client"] = "client"


class ClientToolResult(Model):
    """One result a caller posts for a client tool call."""

    tool_call_id: str = Field(min_length=1, max_length=limits.MAX_ID_CHARS * 2)
    content: str = Field(max_length=limits.MAX_TOOL_RESULT_CHARS)
    is_error: bool = False


class ToolPolicy(Model):
    enabled: bool | None = None
    allow_list: list[str] | None = Field(default=None, max_length=limits.MAX_TOOL_NAMES)
    max_parallel: int | None = Field(default=None, ge=1, le=64)
    max_calls_per_run: int | None = Field(default=None, ge=0, le=10_000)
    require_approval_by_default: bool | None = None
    approval_timeout_ms: int | None = Field(default=None, ge=1, le=30 * 24 * 3_600_000)


class LoopLimits(Model):
    max_iterations: int | None = Field(default=None, ge=1, le=1_000)
    max_tool_rounds: int | None = Field(default=None, ge=0, le=1_000)
    max_run_duration_ms: int | None = Field(default=None, ge=1, le=7 * 24 * 3_600_000)
    max_repairs: int | None = Field(default=None, ge=0, le=10)  # repair turns of a structured answer
    # tool calls executed in the run (internal ones not counted); default 100 (worker/core/config.py)
    max_tool_calls: int | None = Field(default=None, ge=0, le=10_000)
    max_depth: int | None = Field(default=None, ge=0, le=10)  # sub-agent nesting (default 3)


class Budget(Model):
    """``RunInput.budget`` (and a profile's): the most a run may spend on model calls. Before each
    call the worker reserves the call's worst case (its prompt estimate + the model's maxTokens, and
    their cost by the model's prices, no prompt token cheaper than the input price); a run that
    cannot afford its next call ends ``failed`` with ``lastError.code = "budget_exceeded"``, and
    spends its calls' actual cost (cache reads at their price). maxCostUsd needs a priced model: on
    one with no price a submission is refused (422 ``unpriced_model``)."""

    max_tokens: int | None = Field(default=None, ge=1, le=10**12)
    max_cost_usd: float | None = Field(default=None, gt=0, le=1e9, allow_inf_nan=False)


class ConcurrencyKey(Model):
    """``RunInput.concurrency``: at most ``limit`` runs with this key (within the tenant) hold a slot
    at once, pool-wide, from their release to the queue until they end (parked ones included). The
    others stay ``queued`` without a worker, their view's ``waitingFor`` naming the key, and are
    released in queue order (priority, then submission) as slots free up. ``limit`` may be left out
    when the tenant's quota gives one (concurrencyLimit: the default, and the most a run may ask)."""

    key: str = Field(
        min_length=1, max_length=limits.MAX_CONCURRENCY_KEY_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$"
    )
    limit: int | None = Field(default=None, ge=1, le=limits.MAX_CONCURRENCY_LIMIT)


class Debounce(Model):
    """``RunInput.debounce``: a run submitted with this key (within the tenant) while an earlier run
    of the key waits to start replaces it: the earlier one ends ``superseded`` (its lastError names
    the run that replaced it; its id stays readable), and this one starts ``periodMs``
    after its own submission (it is ``scheduled`` until then), unless replaced in turn."""

    key: str = Field(
        min_length=1, max_length=limits.MAX_CONCURRENCY_KEY_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$"
    )
    period_ms: int = Field(ge=1, le=limits.MAX_DEBOUNCE_MS)


class RateKey(Model):
    """``RunInput.rate``: at most ``limit`` runs with this key (within the tenant) start in any
    ``periodS`` seconds. A run beyond is accepted and delayed, never refused: ``scheduled`` until the
    next start the key has room for (its view's ``runAt``, and ``waitingFor`` naming the key)."""

    key: str = Field(
        min_length=1, max_length=limits.MAX_CONCURRENCY_KEY_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$"
    )
    limit: int = Field(ge=1, le=limits.MAX_RATE_LIMIT)
    period_s: int = Field(ge=1, le=limits.MAX_RATE_PERIOD_S)


def _local_refs_only(value: Any) -> bool:
    """Every ``$ref`` inside points into the schema itself (``#…``): nothing is fetched or resolved
    elsewhere when an answer is validated."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            ref = v.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):  # (a dict: a property named $ref)
                return False
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return True


class JsonSchemaFormat(Model):
    """OpenAI's ``response_format.json_schema``: the schema the final answer must validate against."""

    name: str = Field(default="output", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=4096)
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None

    @field_validator("schema_")
    @classmethod
    def _a_bounded_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Its size and references, cheap; that it is a JSON Schema (2020-12) within its bounds is
        checked by the server when the run is submitted (a 422 naming the field), as the metaschema's
        check costs milliseconds per subschema."""
        try:
            size = len(orjson.dumps(value))
        except orjson.JSONEncodeError as exc:
            raise ValueError(f"cannot be stored as JSON: {exc}") from None
        if size > limits.MAX_SCHEMA_BYTES:
            raise ValueError(f"is larger than {limits.MAX_SCHEMA_BYTES} bytes of JSON")
        if not _local_refs_only(value):
            raise ValueError("only local $ref values (starting with #) are allowed")
        return value


class ResponseFormat(Model):
    """``RunInput.responseFormat``, OpenAI's shape: ``{"type": "json_schema", "jsonSchema": {…}}``
    (the final answer is JSON valid against the schema) or ``{"type": "json_object"}`` (a JSON object)."""

    type: Literal["json_schema", "json_object"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_iff_json_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError('type "json_schema" needs jsonSchema')
        if self.type != "json_schema" and self.json_schema is not None:
            raise ValueError(f'jsonSchema is only allowed with type "json_schema", not {self.type!r}')
        return self


class MultitaskStrategy(StrEnum):
    ENQUEUE = "enqueue"
    REJECT = "reject"
    INTERRUPT = "interrupt"


def _finite(value: Any) -> bool:
    """No NaN or ±Infinity anywhere inside (JSON has no such numbers; they would be stored as null)."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, list | tuple):
            todo.extend(v)
    return True


def _bounded_map(value: dict[str, Any] | None, field: str) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        data = orjson.dumps(value)
    except orjson.JSONEncodeError as exc:  # an integer past 64 bits, a lone surrogate …
        raise ValueError(f"{to_camel(field)} cannot be stored as JSON: {exc}") from None
    # orjson writes NaN and ±Infinity as null: only a map whose JSON holds a null needs the walk.
    if b"null" in data and not _finite(value):
        raise ValueError(f"{field} holds NaN or Infinity, which JSON cannot carry")
    size = len(data)
    if size > limits.MAX_MAP_BYTES:
        raise ValueError(f"{to_camel(field)} is larger than {limits.MAX_MAP_BYTES} bytes of JSON")
    return value


def usable_url(value: str, field: str) -> str:
    """An http(s) URL with a host and, if any, a port in range; else ValueError naming the field."""
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"{field} is not a usable URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{field} is not a usable URL: it needs http(s) and a host")
    return value


class RunInput(Model):
    """What a caller submits. `runId` is generated by the producer when missing."""

    session_id: str | None = Field(default=None, pattern=ID_PATTERN)
    run_id: str | None = Field(default=None, pattern=ID_PATTERN)
    agent: str = Field(default="default", min_length=1, max_length=128)
    # A tenant's agent (POST /v1/agents): the version the run is pinned to, set by the API at
    # submission (the agent's current or ramped version, or the one ``agent: "name@n"`` asks for).
    agent_version: int | None = Field(default=None, ge=1)
    input_messages: list[Message] = Field(min_length=1, max_length=limits.MAX_INPUT_MESSAGES)
    system_prompt_override: str | None = Field(default=None, max_length=limits.MAX_MESSAGE_CHARS)
    allowed_tools: list[str] | None = Field(default=None, max_length=limits.MAX_TOOL_NAMES)
    tool_order: list[str] | None = Field(default=None, max_length=limits.MAX_TOOL_NAMES)
    tool_policy: ToolPolicy | None = None
    loop_limits: LoopLimits | None = None
    # Compaction starts when the transcript has more messages than this: it can only lower the
    # profile's compaction.maxMessages, never raise it (the design documents' compactThreshold).
    compact_threshold: int | None = Field(default=None, ge=4, le=limits.MAX_COMPACT_THRESHOLD)
    budget: Budget | None = None  # narrowed by the profile's (it can only narrow)
    auto_create_session: bool | None = None
    multitask_strategy: MultitaskStrategy | None = None
    runtime_init_data: dict[str, Any] | None = None
    runtime_hints: dict[str, Any] | None = None
    client_tools: list[ClientTool] | None = Field(default=None, max_length=limits.MAX_TOOL_NAMES)
    response_format: ResponseFormat | None = None  # the final answer must be JSON (validated)
    include_messages: bool | None = None  # the final transcript in result.messages (bounded: limits.py)
    metadata: dict[str, Any] | None = None
    webhook: str | None = Field(default=None, max_length=2048, pattern=r"^https?://")
    # Higher runs first (0-9; None: DEFAULT_PRIORITY); a tenant's quota may cap it (docs/api.md#priority).
    priority: int | None = Field(default=None, ge=limits.MIN_PRIORITY, le=limits.MAX_PRIORITY)
    # When the run may start: epoch ms, or an RFC 3339 time (stored as epoch ms). Until then: scheduled.
    run_at: int | None = Field(default=None, ge=0, le=limits.MAX_RUN_AT_MS)
    # False: once the run ends, its events, result, input and archive rows keep no message or tool
    # content (marked contentRedacted; usage and timings kept) and its transcript is dropped.
    # None: its agent profile's storeContent (true unless the profile says otherwise).
    store_content: bool | None = None
    # At most concurrency.limit runs of concurrency.key at once; the others wait queued (docs/api.md).
    concurrency: ConcurrencyKey | None = None
    # Submissions of one debounce key within periodMs of each other: only the last runs (docs/api.md).
    debounce: Debounce | None = None
    # At most rate.limit runs of rate.key start per rate.periodS; the others are delayed (docs/api.md).
    rate: RateKey | None = None
    # "economy": each model call goes through the provider's batch endpoint at its batch price, the
    # run waiting on no worker meanwhile, if the profile allows it (docs/api.md#the-economy-lane).
    lane: Literal["standard", "economy"] | None = None
    # By when an economy run should be done (epoch ms or RFC 3339; None: the profile's default): a
    # call its batch has not answered in time goes to the standard lane.
    deadline: int | None = Field(default=None, ge=0, le=limits.MAX_RUN_AT_MS)

    @field_validator("run_at", mode="before")
    @classmethod
    def _run_at_ms(cls, value: Any) -> Any:
        return run_at_ms(value)

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline_ms(cls, value: Any) -> Any:
        return run_at_ms(value, "deadline")

    @model_validator(mode="after")
    def _run_at_alone(self) -> RunInput:
        if self.run_at is not None and (self.session_id is not None or self.auto_create_session):
            raise ValueError(
                "runAt: a run in a session starts when the session's run before it ends; not both"
            )
        return self

    @model_validator(mode="after")
    def _concurrency_alone(self) -> RunInput:
        if self.concurrency is not None and (self.session_id is not None or self.auto_create_session):
            raise ValueError(
                "concurrency: a session runs one run at a time already; a run in a session takes no "
                "concurrency key"
            )
        if self.debounce is not None:
            if self.session_id is not None or self.auto_create_session:
                raise ValueError("debounce: a run in a session takes no debounce key")
            if self.concurrency is not None:
                raise ValueError("debounce: a run takes a debounce key or a concurrency key, not both")
            if self.run_at is not None:
                raise ValueError("debounce: the run starts debounce.periodMs after its submission; no runAt")
        if self.rate is not None:
            if self.session_id is not None or self.auto_create_session:
                raise ValueError("rate: a run in a session takes no rate key")
            if self.run_at is not None or self.debounce is not None:
                raise ValueError("rate: a rate key decides when the run starts; no runAt nor debounce")
        return self

    @field_validator("input_messages")
    @classmethod
    def _no_assistant_tool_calls(cls, value: list[Message]) -> list[Message]:
        for m in value:
            if m.role not in ("user", "system", "assistant"):
                raise ValueError("inputMessages may hold system, user and assistant messages only")
            if m.tool_calls:
                raise ValueError("inputMessages may not carry toolCalls")
        return value

    @field_validator("webhook")
    @classmethod
    def _webhook_url(cls, value: str | None) -> str | None:
        return None if value is None else usable_url(value, "webhook")

    @field_validator("runtime_init_data", "runtime_hints", "metadata")
    @classmethod
    def _maps_bounded(cls, value: dict[str, Any] | None, info: Any) -> dict[str, Any] | None:
        return _bounded_map(value, info.field_name)


def run_at_ms(value: Any, name: str = "runAt") -> Any:
    """``runAt`` (or another time field, ``name``) as epoch ms: an int stays, an RFC 3339 string (with its offset, or ``Z``) or an
    aware datetime becomes its epoch ms; anything else is left for the field's own check to refuse."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{name}: the time needs its timezone")
        return int(value.timestamp() * 1000)
    if isinstance(value, str) and not value.isdigit():
        try:
            when = datetime.fromisoformat(value.replace("z", "Z"))
        except ValueError:
            raise ValueError(f"{name}: an RFC 3339 time (2026-01-31T09:00:00Z) or epoch ms") from None
        if when.tzinfo is None:
            raise ValueError(f"{name}: the time needs its offset (Z or +hh:mm)")
        return int(when.timestamp() * 1000)
    if isinstance(value, str):
        return int(value)
    return value


class ApprovalDecision(Model):
    tool_call_id: str = Field(min_length=1, max_length=limits.MAX_ID_CHARS * 2)
    approved: bool
    reason: str | None = Field(default=None, max_length=4096)
