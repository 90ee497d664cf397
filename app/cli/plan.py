"""What ``agentmill submit`` decides without I/O: a JSONL file's items and its bad lines, the parts
a batch is sent in (fixed by their offsets, so a resumed submission sends the very same parts),
which parts are still to send, and how long to wait before sending a refused part again."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson

from shared.backoff import backoff_ms
from shared.profiles import RetryConfig

__all__ = [
    "RETRY",
    "RETRYABLE_STATUSES",
    "Parsed",
    "Part",
    "parse_jsonl",
    "parts",
    "retry_delay_ms",
    "to_send",
]

# A part refused for a passing reason is sent again: 0.5 s doubling up to 15 s, 8 times (about a
# minute), or after the API's Retry-After when it says more (up to 60 s).
RETRY = RetryConfig(
    max_retries=8, base_delay_ms=500, max_delay_ms=15_000, jitter=0.2, retry_after_cap_ms=60_000
)
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
# Item errors that pass (a quota, Redis briefly away): the part is not done, it is sent again whole.
PASSING_CODES = frozenset(
    {"enqueue_failed", "rate_limited", "quota_exceeded", "queue_full", "redis_unavailable"}
)


@dataclass(frozen=True)
class Parsed:
    """The file's runs (the JSON objects, in file order; item i is ``items[i]``, from line
    ``lines[i]``) and its bad lines as (line number, why). Blank lines are neither."""

    items: list[dict[str, Any]]
    lines: list[int]
    bad: list[tuple[int, str]]


def parse_jsonl(data: bytes) -> Parsed:
    items: list[dict[str, Any]] = []
    lines: list[int] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            bad.append((number, f"not JSON: {exc}"))
            continue
        if not isinstance(value, dict):
            bad.append((number, f"not a JSON object (a run is an object; got {type(value).__name__})"))
            continue
        items.append(value)
        lines.append(number)
    return Parsed(items, lines, bad)


@dataclass(frozen=True)
class Part:
    """Items ``offset`` … ``offset + count - 1`` of the batch; the last part closes the batch."""

    number: int  # 1-based, for messages
    offset: int
    count: int
    last: bool


def parts(n: int, size: int) -> list[Part]:
    starts = range(0, n, max(1, size))
    return [Part(k + 1, s, min(size, n - s), s + size >= n) for k, s in enumerate(starts)]


def to_send(plan: list[Part], acknowledged: Collection[int]) -> list[Part]:
    """The parts whose offsets were not acknowledged, in order. When any is left, the closing part
    goes last, even if it was acknowledged before: a part sent after it would reopen the batch."""
    left = [p for p in plan if p.offset not in acknowledged]
    if left and not left[-1].last:
        left.append(plan[-1])
    return left


def retry_delay_ms(
    attempt: int, status: int | None, retry_after_s: float | None, jitter_u: float
) -> int | None:
    """Wait before sending a part again after failed attempt number ``attempt`` (1-based), or None
    to give up. ``status`` None: no answer came (the connection failed or timed out)."""
    if attempt > RETRY.max_retries or (status is not None and status not in RETRYABLE_STATUSES):
        return None
    after = None if retry_after_s is None else round(retry_after_s * 1000)
    return backoff_ms(attempt, RETRY, jitter_u, after)
