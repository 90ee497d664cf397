"""Pure run policy: retry classification, backoff, tool selection, size estimates.

No I/O, no clock, no randomness: jitter arrives as a number in [0, 1) drawn by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from agentmill_client.models import Message, ResponseFormat, ToolPolicy, Usage
from shared.backoff import backoff_ms as backoff_ms  # the machine retries model calls by it
from shared.profiles import Pricing
from shared.schema_validator import SchemaBoundError, validation_errors

__all__ = [
    "CONTENT_FILTER",
    "CUT_OFF_CALL",
    "DEFAULT_MAX_PARALLEL",
    "LENGTH",
    "MAX_TOKENS",
    "REFUSAL",
    "RETRYABLE_STATUSES",
    "Classification",
    "FailureKind",
    "ModelFailure",
    "allowed_tools",
    "argument_problem",
    "backoff_ms",
    "check_output",
    "classify",
    "estimate_tokens",
    "narrow_tool_policy",
    "prompt_bound",
    "reply_failure",
    "request_tokens",
]


DEFAULT_MAX_PARALLEL = 1  # toolPolicy.maxParallel when the profile sets none: calls of a round run one by one
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
Classification = Literal["retryable", "fatal", "overflow"]
FailureKind = Literal[
    "connection",
    "timeout",
    "http",
    "invalid",
    "overflow",
    "stream",
    "internal",
    "truncated",
    "content_filter",
    "empty",
]


@dataclass(frozen=True, slots=True)
class ModelFailure:
    """What went wrong with one model-call attempt, as plain data."""

    kind: FailureKind
    message: str
    status: int | None = None
    retry_after_ms: int | None = None

    @property
    def reason(self) -> str:
        return f"http_{self.status}" if self.kind == "http" and self.status else self.kind


def classify(failure: ModelFailure) -> Classification:
    """Network errors, timeouts, 429 and 5xx retry; 4xx and invalid requests do not."""
    if failure.kind == "overflow":
        return "overflow"
    if failure.kind in ("connection", "timeout", "stream", "truncated", "empty"):
        return "retryable"
    retryable_status = failure.status is not None and (
        failure.status in RETRYABLE_STATUSES or failure.status >= 500
    )
    return "retryable" if failure.kind == "http" and retryable_status else "fatal"


LENGTH = "length"  # the reply hit max_tokens (or the context end)
CONTENT_FILTER = "content_filter"
MAX_TOKENS = "max_tokens"  # anthropic: the reply hit the request's max_tokens
REFUSAL = "refusal"  # anthropic: the model declined to answer
CUT_OFF_CALL = (
    "error: the model's reply hit its token limit (finish_reason length) before this tool call was "
    "complete, so it was not executed. Ask again with shorter arguments."
)


def reply_failure(finish_reason: str | None, *, empty: bool = False) -> ModelFailure | None:
    """A streamed reply counts only when the stream said it ended (a ``finish_reason``).

    None: the stream stopped without one (a server interrupted it, a proxy cut it): a retryable
    truncation. ``content_filter``: the provider withheld the answer; the run fails with its own
    code, as does Anthropic's ``refusal``; Anthropic's ``max_tokens`` is a truncation (retried, never
    a success). A reply with neither text nor a tool call (llama-cpp-python answers so to some
    ``tool_choice: auto`` requests) is retried too: an empty answer is no success. Every other
    reason (``stop``, ``tool_calls``, ``length``, …) is a complete reply; the machine handles
    ``length`` (cut-off tool calls are not executed).
    """
    if finish_reason is None:
        return ModelFailure(
            kind="truncated", message="the stream ended without a finish_reason: the answer was cut off"
        )
    if finish_reason == CONTENT_FILTER:
        return ModelFailure(
            kind="content_filter", message="the provider stopped the answer (finish_reason content_filter)"
        )
    if finish_reason == REFUSAL:
        return ModelFailure(
            kind="content_filter", message="the model refused to answer (stop_reason refusal)"
        )
    if finish_reason == MAX_TOKENS:
        return ModelFailure(
            kind="truncated",
            message="the reply hit the provider's maxTokens before it ended (stop_reason max_tokens): "
            "raise provider.maxTokens",
        )
    if empty:
        return ModelFailure(
            kind="empty",
            message=f"the model answered with no text and no tool call (finish_reason {finish_reason})",
        )
    return None


def narrow_tool_policy(profile: ToolPolicy, run: ToolPolicy | None) -> ToolPolicy:
    """The run's toolPolicy applied to the profile's: a run can narrow what its profile allows,
    never widen it. Tools stay off if either turns them off, allow-lists intersect, approval is
    required if either requires it, and numeric caps take the smaller value (a cap the profile
    leaves unset is its default: maxParallel's is ``DEFAULT_MAX_PARALLEL``, the others' unlimited)."""
    if run is None:
        return profile

    def both(a: int | None, b: int | None) -> int | None:
        return b if a is None else a if b is None else min(a, b)

    allow: list[str] | None
    if profile.allow_list is None or run.allow_list is None:
        allow = run.allow_list if profile.allow_list is None else profile.allow_list
    else:
        keep = set(run.allow_list)
        allow = [n for n in profile.allow_list if n in keep]
    off = profile.enabled is False or run.enabled is False
    approve = bool(profile.require_approval_by_default or run.require_approval_by_default)
    return ToolPolicy(
        enabled=False if off else (run.enabled if run.enabled is not None else profile.enabled),
        allow_list=allow,
        max_parallel=both(profile.max_parallel or DEFAULT_MAX_PARALLEL, run.max_parallel),
        max_calls_per_run=both(profile.max_calls_per_run, run.max_calls_per_run),
        require_approval_by_default=approve or None,
        approval_timeout_ms=both(profile.approval_timeout_ms, run.approval_timeout_ms),
    )


def allowed_tools(
    profile_tools: Sequence[str],
    *,
    enabled: bool | None,
    allow_list: Iterable[str] | None,
    allowed: Iterable[str] | None,
    order: Sequence[str] | None,
) -> list[str]:
    """toolPolicy.allowList ∩ allowedTools (a missing one means all), ordered by toolOrder first."""
    if enabled is False:
        return []
    names = list(dict.fromkeys(profile_tools))
    if allow_list is not None:
        keep = set(allow_list)
        names = [n for n in names if n in keep]
    if allowed is not None:
        keep = set(allowed)
        names = [n for n in names if n in keep]
    if order:
        # Named tools first, in toolOrder's order; the rest keep the profile's order (sort is stable).
        rank = {n: i for i, n in enumerate(order)}
        names.sort(key=lambda n: rank.get(n, len(rank)))
    return names


def request_tokens(messages: Iterable[Message], max_tokens: int | None) -> int:
    """What a call is counted against tokensPerMinute before it runs: its prompt estimate plus the
    reply it may write (maxTokens). The provider's reported usage replaces it afterwards."""
    return estimate_tokens(messages) + (max_tokens or 0)


def argument_problem(schema: dict[str, Any], args: Any) -> str | None:
    """Why ``args`` do not fit the JSON Schema ``schema`` (the first error, with its path), or None.
    A schema past its bounds (shared/schema_bounds.py) fits nothing: the problem names the bound."""
    try:
        errors = sorted(validation_errors(schema, args), key=lambda e: list(e.path))
    except SchemaBoundError as exc:
        return f"the tool's parameters schema cannot be applied: {exc.message} (bound: {exc.bound})"
    if not errors:
        return None
    where = "/".join(str(p) for p in errors[0].path) or "arguments"
    return f"{where}: {errors[0].message}"


MAX_OUTPUT_PROBLEMS = 5  # validation errors reported per answer (to the model, in lastError)
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n(.*)\n```$", re.DOTALL)


def check_output(fmt: ResponseFormat, text: str) -> tuple[Any, list[str]]:
    """A final answer against ``responseFormat``: (the parsed value, []) when it is valid, else
    (None, the first problems, each ``path: message``). The answer may sit in one Markdown code fence."""
    raw = text.strip()
    if (fenced := _FENCE.match(raw)) is not None:
        raw = fenced.group(1)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, [f"the answer is not JSON: {exc}"]
    if fmt.json_schema is None:  # json_object
        return (value, []) if isinstance(value, dict) else (None, ["the answer must be a JSON object"])
    problems: list[str] = []
    try:
        for err in validation_errors(fmt.json_schema.schema_, value, MAX_OUTPUT_PROBLEMS):
            where = "/".join(str(p) for p in err.absolute_path) or "(root)"
            problems.append(f"{where}: {err.message[:300]}")
    except SchemaBoundError as exc:  # past a bound (a dangling #-ref, a budget spent …)
        problems.append(f"the schema could not be applied: {exc.message[:300]} (bound: {exc.bound})")
    return (None, problems) if problems else (value, [])


IMAGE_TOKENS = 768  # an image's share of a request, estimated (OpenAI: 85 to about 1,100 by size)


def estimate_tokens(messages: Iterable[Message]) -> int:
    """A provider-neutral estimate: four characters a token, plus a little per message, and
    IMAGE_TOKENS an image (its size is the provider's business).

    It walks the whole transcript, several times a step (the compaction check, the budget, the
    provider limiter's hold), so a long run pays it on every step: a message whose content is a
    string (nearly all) is counted without ``Message.text`` and ``images()``, a third of the time
    (21 messages: 4.4 against 12-16 µs)."""
    total = 0
    for m in messages:
        content = m.content
        if content.__class__ is str:
            total += 4 + len(content) // 4
        else:
            total += 4 + len(m.text) // 4 + IMAGE_TOKENS * len(m.images())
        calls = m.tool_calls
        if calls:
            for c in calls:
                total += (len(c.name) + len(c.arguments)) // 4 + 4
    return total


MESSAGE_TOKENS = 8  # a message's share of the chat format (role, separators) in prompt_bound


def prompt_bound(messages: Iterable[Message]) -> int:
    """An upper bound on the prompt tokens of ``messages`` that their text cannot push past, for
    reservations a tenant must not be able to game (its day budget): one token a UTF-8 byte, plus
    MESSAGE_TOKENS a message and IMAGE_TOKENS an image.

    A byte-level BPE tokenizer (OpenAI's, Llama 3's, most open models') never writes more tokens than
    the text has bytes, and SentencePiece with byte fallback writes at most one a byte too; so text
    crafted to tokenize badly (rare characters, random symbols) stays within it, where
    ``estimate_tokens``' four characters a token may fall short sixteenfold. For English it is about
    four times the tokens counted, which only matters near the end of a budget: settlement replaces
    the hold by the provider's count. ASCII text (nearly all) is measured without being encoded."""
    total = 0
    for m in messages:
        content = m.content
        if content.__class__ is str:
            total += MESSAGE_TOKENS + _bytes(content)
        else:
            total += MESSAGE_TOKENS + _bytes(m.text) + IMAGE_TOKENS * len(m.images())
        if m.tool_call_id is not None:
            total += _bytes(m.tool_call_id)
        calls = m.tool_calls
        if calls:
            for c in calls:
                total += MESSAGE_TOKENS + _bytes(c.provider_id or c.id) + _bytes(c.name) + _bytes(c.arguments)
    return total


def _bytes(text: str) -> int:
    """UTF-8 bytes of ``text`` (a lone surrogate counts its three, as a Python caller may send one)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def call_usage(
    reported: Usage | None, request: Iterable[Message], reply: Message, pricing: Pricing | None
) -> Usage:
    """One model call's usage: the provider's when it reported one, else an estimate marked
    ``estimated``; costed by the model's pricing, cache reads and writes at theirs (None without one).
    A provider's cache reads and writes are parts of its input tokens: a count of input below their
    sum is raised to it (the cost then prices no token twice)."""
    u = reported or Usage(
        input_tokens=estimate_tokens(request), output_tokens=estimate_tokens([reply]), estimated=True
    )
    cached = u.cache_read_tokens + u.cache_write_tokens
    inp = max(u.input_tokens, cached)
    cost = None
    if pricing is not None:
        cost = pricing.cost_usd(inp, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)
    if cost == u.cost_usd and inp == u.input_tokens:  # (unpriced, or priced as reported): as it is
        return u
    return u.model_copy(update={"cost_usd": cost, "input_tokens": inp})
