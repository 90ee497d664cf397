"""The one backoff rule, pure: model-call retries (worker/core/policy.py) and webhook
deliveries (producer/webhooks.py) all wait ``backoff_ms`` between attempts, each with its own
RetryConfig. No clock, no randomness: jitter arrives as a number in [0, 1) drawn by the caller."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.profiles import RetryConfig

__all__ = ["backoff_ms"]


def backoff_ms(
    attempt: int, cfg: RetryConfig, jitter_u: float = 0.5, retry_after_ms: int | None = None
) -> int:
    """Delay before retry number ``attempt`` (1-based): base * 2^(attempt-1), capped, jittered ±jitter
    (``jitter_u`` 0.5 is the middle: no jitter).

    A server's Retry-After wins when it is longer, up to ``retry_after_cap_ms``.
    """
    exp = min(cfg.max_delay_ms, cfg.base_delay_ms * (1 << max(0, attempt - 1)))
    delay = exp * (1.0 + cfg.jitter * (2.0 * jitter_u - 1.0))
    delay = min(float(cfg.max_delay_ms), max(0.0, delay))
    if retry_after_ms is not None:
        delay = max(delay, float(min(retry_after_ms, cfg.retry_after_cap_ms)))
    return round(delay)
