"""Pool activity by minute, the one fact both sides share: each worker adds the runs it started and
ended since its last report to the minute's hash on partition 0 (worker/telemetry/pool_report.py, one
pipelined round trip every ``REPORT_S``, nothing per run); the API reads the last hour
(producer/pool.py) for the console's pool page. No external service is needed."""

from __future__ import annotations

__all__ = ["FIELDS", "KEEP_S", "REPORT_S", "WINDOW_MIN", "minute_of"]

FIELDS = ("started", "completed", "failed", "aborted")  # started: new runs, not resumes
REPORT_S = 10.0  # how often a worker reports; a minute's figures are final REPORT_S after it ends
WINDOW_MIN = 60  # minutes the pool page draws
KEEP_S = 2 * 3600  # a minute's hash expires after this (only the last hour is read)


def minute_of(ms: int) -> int:
    """Epoch minutes of a time in epoch milliseconds."""
    return ms // 60_000
