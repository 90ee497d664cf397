"""A submitter's W3C trace context (``traceparent``, ``tracestate``) as a run stores it, pure.

The API and the Python client pass the headers through ``stored``, which keeps them only when the
``traceparent`` is well formed (version 00 rules of the W3C Trace Context spec; anything else is
ignored, as the spec asks of a receiver) and bounds ``tracestate``; the submit scripts keep the
result in the run hash (``RunField.TRACE``) and ``acquire`` hands it to every attempt, which
continues the trace from it (worker/telemetry/tracing.py). No OpenTelemetry import here: a producer without
traces pays for one regular expression per submission.
"""

from __future__ import annotations

import re

__all__ = ["MAX_TRACESTATE_CHARS", "headers", "stored"]

MAX_TRACESTATE_CHARS = 512  # the spec's suggested limit a receiver may truncate to

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z")


def stored(traceparent: str | None, tracestate: str | None = None) -> str:
    """What a run stores of a submission's trace headers: ``traceparent``, then a newline and
    ``tracestate`` when there is one; '' when ``traceparent`` is missing or malformed."""
    tp = (traceparent or "").strip().lower()
    if not _TRACEPARENT.match(tp) or tp.startswith("ff"):
        return ""
    ts = (tracestate or "").strip()
    if not ts or len(ts) > MAX_TRACESTATE_CHARS or "\n" in ts or "\r" in ts:
        return tp
    return f"{tp}\n{ts}"


def headers(trace: str) -> dict[str, str]:
    """The headers a stored trace context came from ({} for '')."""
    if not trace:
        return {}
    tp, _, ts = trace.partition("\n")
    return {"traceparent": tp, "tracestate": ts} if ts else {"traceparent": tp}
