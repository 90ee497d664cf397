"""The API's Prometheus metrics. Queue depth and runs awaiting approval are read from Redis and
exported here, and only here, so they are not multiplied by the number of workers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

__all__ = ["LATENCY_BUCKETS", "ApiMetrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "agentmill_api_requests", "HTTP requests by route template and status.", ["method", "route", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "agentmill_api_request_duration_seconds", "HTTP request duration (SSE: until the stream ends).",
            ["route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.submissions = Counter(
            "agentmill_api_submissions",
            "Runs submitted through the API, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "agentmill_queue_depth",
            "Jobs waiting in arq's queue (runs queued or running).",
            registry=self.registry,
        )
        self.awaiting = Gauge(
            "agentmill_runs_awaiting_approval",
            "Runs waiting for a human decision on a tool call (no worker holds them).",
            registry=self.registry,
        )

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def submitted(self, accepted: bool, n: int = 1) -> None:
        if n:
            self.submissions.labels("accepted" if accepted else "rejected").inc(n)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
