"""The API's Prometheus metrics. Queue depth, runs awaiting approval and the scaling signal are read
from Redis at each scrape (producer/gauges.py) and exported here, and only here, so they are not
multiplied by the number of workers; a scrape that cannot read Redis exports none of them (absent,
not the last value seen).

Every label value comes from a fixed set: the method from ``METHODS`` (else ``other``), the route
its template (``unmatched`` when no route matched), the ``code`` a valid HTTP status (else
``other``), so no request can mint a series. The submission outcomes exist at 0 from start-up, so
``rate()``/``increase()`` see the first one; no ``_created`` series are exported. The open SSE
streams and long-polls are read from the process's StreamLimiter at each scrape; the build info and
the process collectors come from shared/process_metrics.py.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from producer.api.streams import LONG_POLL, SSE, StreamLimiter
from producer.gauges import ClusterGauges
from shared.process_metrics import register_process_metrics

__all__ = ["LATENCY_BUCKETS", "METHODS", "SUBMISSION_OUTCOMES", "ApiMetrics", "ClusterCollector"]

disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
SUBMISSION_OUTCOMES = ("accepted", "replayed", "rejected")  # replayed: an idempotent resubmission


class ClusterCollector(Collector):
    """The gauges read from Redis for the scrape under way; none when the read failed."""

    def __init__(self) -> None:
        self.reading: ClusterGauges | None = None

    def describe(self) -> list[Metric]:
        return []  # registered without a collect(): there is no reading at start-up

    def collect(self) -> Iterator[Metric]:
        g = self.reading
        if g is None:
            return
        yield GaugeMetricFamily(
            "agentmill_queue_depth",
            "Jobs queued on the partitions, summed: runs queued, not yet claimed (running runs "
            "and scheduled runs not due yet are not in it; jobs held back by a tenant's running cap are).",
            value=g.queue_depth,
        )
        lanes = GaugeMetricFamily(
            "agentmill_queue_depth_by_priority",
            "agentmill_queue_depth by the runs' priority (0-9, higher first): ten series, always.",
            labels=["priority"],
        )
        for p, n in enumerate(g.by_priority):
            lanes.add_metric([str(p)], n)
        yield lanes
        yield GaugeMetricFamily(
            "agentmill_runs_scheduled",
            "Runs submitted with a runAt still ahead (status scheduled): queued once due.",
            value=g.scheduled,
        )
        yield GaugeMetricFamily(
            "agentmill_runs_awaiting_approval",
            "Runs waiting for a human decision on a tool call (no worker holds them).",
            value=g.awaiting,
        )
        yield GaugeMetricFamily(
            "agentmill_worker_slots_wanted",
            "Worker slots the load wants now: queued jobs a worker could claim now plus runs running "
            "(jobs a tenant's running cap holds back left out). Scale workers on it.",
            value=g.slots_wanted,
        )


class ApiMetrics:
    """``streams``: the process's bound on SSE streams and long-polls, whose open ones it exports."""

    def __init__(self, streams: StreamLimiter | None = None) -> None:
        self.registry = CollectorRegistry()
        register_process_metrics(self.registry)
        self.requests = Counter(
            "agentmill_api_requests", "HTTP requests by method, route template and status code.",
            ["method", "route", "code"], registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "agentmill_api_request_duration_seconds", "HTTP request duration (SSE: until the stream ends).",
            ["route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.submissions = Counter(
            "agentmill_api_submissions",
            "Runs submitted through the API, by outcome (replayed: the same runId or Idempotency-Key "
            "again, answered with the run it names).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in SUBMISSION_OUTCOMES:
            self.submissions.labels(outcome)
        # The API's stream limiter, set by the Api once it is made (this registry exists before it).
        self.streams = streams or StreamLimiter(0, 0)
        Gauge(
            "agentmill_api_sse_streams_open",
            "Server-Sent Event streams (GET /v1/runs/{id}/events) this API process holds open now; "
            "with the long-polls, at most AGENTMILL_MAX_STREAMS.",
            registry=self.registry,
        ).set_function(lambda: self.streams.open_of(SSE))
        Gauge(
            "agentmill_api_long_polls_open",
            "Long-polls (GET /v1/runs/{id}/wait) this API process holds open now.",
            registry=self.registry,
        ).set_function(lambda: self.streams.open_of(LONG_POLL))
        Gauge(
            "agentmill_api_streams_max",
            "AGENTMILL_MAX_STREAMS: the SSE streams and long-polls one API process holds at most (429 beyond).",
            registry=self.registry,
        ).set_function(lambda: self.streams.total)
        self.cluster = ClusterCollector()
        self.registry.register(self.cluster)

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        m = method if method in METHODS else "other"
        code = str(status) if 100 <= status <= 599 else "other"
        self.requests.labels(m, route, code).inc()
        self.latency.labels(route).observe(seconds)

    def submitted(self, outcome: str, n: int = 1) -> None:
        if n:
            self.submissions.labels(outcome if outcome in SUBMISSION_OUTCOMES else "rejected").inc(n)

    def render(self, reading: ClusterGauges | None = None) -> tuple[bytes, str]:
        self.cluster.reading = reading
        try:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        finally:
            self.cluster.reading = None
