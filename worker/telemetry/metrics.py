"""The worker's Prometheus metrics, fed only by the runner's observer hooks (worker/telemetry/observer.py).

One ``agentmill_`` prefix, base units, ``_total`` counters, buckets fit for LLM latencies. Every
label value comes from a fixed set (``LABELS``; tool names: the tools the deployment's profiles
offer), anything else is ``other``: never runId or sessionId, nothing a model or a caller chose.
Every child of a labelled counter (and of the per-tool and per-state histograms) exists at 0 from
start-up, so ``rate()``/``increase()`` see its first increment, and no ``_created`` series are
exported. Queue depth and the scaling signal are exported by the API (one place), not here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client.exposition import generate_latest

from agentmill_client.models import Usage
from worker.core.config import RECALL_TOOL
from worker.core.history_tools import LOAD_OLDER_HISTORY, SEARCH_HISTORY
from worker.telemetry.metric_families import (
    ITER_BUCKETS,
    LABELS,
    LLM_BUCKETS,
    OTHER,
    RETRY_REASONS,
    RUN_BUCKETS,
    STATE_BUCKETS,
    STEPS,
    TOOL_BUCKETS,
    MetricFamilies,
)

# ``_created`` series (one per child, a timestamp) double a scrape and no query reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

__all__ = [
    "ITER_BUCKETS",
    "LABELS",
    "LLM_BUCKETS",
    "RETRY_REASONS",
    "RUN_BUCKETS",
    "STATE_BUCKETS",
    "TOOL_BUCKETS",
    "MetricsObserver",
    "retry_reason_label",
]


class MetricsObserver(MetricFamilies):
    """``tools``: the tool names the deployment's profiles offer (the only ``tool`` label values
    besides ``other``); ``models``: their (agent, model) pairs (the only ``agent``/``model`` values);
    ``mcp_servers``: their MCP servers' names (the only ``server`` values)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        tools: Iterable[str] = (),
        models: Iterable[tuple[str, str]] = (),
        mcp_servers: Iterable[str] = (),
        fallbacks: Iterable[tuple[str, str, str]] = (),
    ) -> None:
        self._models = frozenset(models)  # (agent, model) pairs of the configured profiles
        self._fallbacks = frozenset(fallbacks)  # (agent, from, to) steps the profiles' chains declare
        super().__init__(registry)
        self._mcp_servers = frozenset(mcp_servers)
        self._tools = frozenset({*tools, RECALL_TOOL, LOAD_OLDER_HISTORY, SEARCH_HISTORY})
        self._precreate()
        self._resolve()

    def _precreate(self) -> None:
        """Every child at 0 (a series that appears at its first increment hides that increment
        from ``rate()``/``increase()``)."""
        tools = (*sorted(self._tools), OTHER)
        by_one: list[tuple[Any, str]] = [
            (self.runs_started, "resumed"), (self.runs_finished, "status"),
            (self.model_calls, "outcome"), (self.model_retries, "reason.retry"),
            (self.tokens, "direction"), (self.events, "kind"), (self.refused, "reason.refused"),
            (self.compactions, "reason.compaction"), (self.throttled_calls, "reason.throttled"),
            (self.redispatched, "reason.redispatch"), (self.state_seconds, "state"),
            (self.lane_changes, "reason.lane"),
        ]  # fmt: skip
        for metric, label in by_one:
            for value in (*LABELS[label], OTHER):
                metric.labels(value)
        for t in tools:
            for metric in (self.tool_duration, self.tool_retries, self.tool_from_record, self.reexecuted):
                metric.labels(t)
            for outcome in LABELS["tool_outcome"]:
                self.tool_calls.labels(t, outcome)
        for server in (*sorted(self._mcp_servers), OTHER):
            self.mcp_duration.labels(server)
            for outcome in LABELS["mcp_outcome"]:
                self.mcp_calls.labels(server, outcome)
        for agent in (*sorted({a for a, _ in self._models}), OTHER):
            self.cache_breaking_compactions.labels(agent)
        for agent, model in (*sorted(self._models), (OTHER, OTHER)):
            self.cost.labels(agent, model)
            for direction in LABELS["direction"]:
                self.usage_tokens.labels(agent, model, direction)
        for src, dst in (*STEPS, (OTHER, OTHER)):
            self.transitions.labels(src, dst)
        for agent, src, dst in sorted(self._fallbacks):
            for reason in LABELS["reason.fallback"]:
                self.model_fallbacks.labels(agent, src, dst, reason)
        for shape in LABELS["shape"]:
            self.shape_fallbacks.labels(shape)

    def _resolve(self) -> None:
        """The children a run's every step feeds, found once by their label values (each a fixed
        set: a value outside it is ``other``'s): a step then costs one dict read, not the label
        checks and ``labels()``. The children never change after start-up (``_Family`` keeps them)."""
        self._step_kids = {
            (src, dst): self.transitions.labels(src, dst) for src, dst in (*STEPS, (OTHER, OTHER))
        }
        self._event_kids = {k: self.events.labels(k) for k in (*LABELS["kind"], OTHER)}
        self._state_kids = {st: self.state_seconds.labels(st) for st in (*LABELS["state"], OTHER)}
        # (agent, model) -> each direction's (tokens, usage_tokens) children, in _DIRECTIONS' order
        self._token_kids = {
            pair: tuple((self.tokens.labels(d), self.usage_tokens.labels(*pair, d)) for d in _DIRECTIONS)
            for pair in (*self._models, (OTHER, OTHER))
        }

    def _tool(self, name: str) -> str:
        return name if name in self._tools else OTHER

    # ---- Observer ----

    def transition(self, src: str, dst: str, event: str) -> None:
        if src != dst:
            kid = self._step_kids.get((src, dst))
            (kid if kid is not None else self._step_kids[OTHER, OTHER]).inc()

    def run_started(self, *, resumed: bool, job_try: int) -> None:
        self.runs_started.labels("true" if resumed else "false").inc()
        self.in_progress.inc()
        if resumed:
            self.resumed.inc()

    def run_finished(self, status: str, *, iterations: int, duration_s: float) -> None:
        self.runs_finished.labels(_bounded(status, "status")).inc()
        self.iterations.observe(iterations)
        self.run_duration.observe(duration_s)
        self.in_progress.dec()

    def run_left(self) -> None:
        """The job ended without finishing the run (handed back, parked, fenced)."""
        self.in_progress.dec()

    def awaiting_human(self, delta: int) -> None:
        """Not a worker series: a parked run belongs to no worker, and an abort or an approval
        timeout ends it without one. The API exports agentmill_runs_awaiting_approval from Redis."""

    def model_call(self, outcome: str, *, latency_s: float, ttft_s: float | None) -> None:
        self.model_calls.labels(_bounded(outcome, "outcome")).inc()
        self.model_latency.observe(latency_s)
        if ttft_s is not None:
            self.ttft.observe(ttft_s)

    def model_retry(self, reason: str) -> None:
        self.model_retries.labels(retry_reason_label(reason)).inc()

    def model_fallback(self, agent: str, src: str, dst: str, reason: str) -> None:
        known = (agent, src, dst) in self._fallbacks and reason in _SETS["reason.fallback"]
        self.model_fallbacks.labels(*((agent, src, dst, reason) if known else (OTHER,) * 4)).inc()

    def shape_fallback(self, shape: str) -> None:
        self.shape_fallbacks.labels(_bounded(shape, "shape")).inc()

    def tokens_used(self, usage: Usage, *, agent: str, model: str) -> None:
        pair = (agent, model) if (agent, model) in self._models else (OTHER, OTHER)
        counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
        for (tokens, by_model), n in zip(self._token_kids[pair], counts, strict=True):
            if n:  # (a cache's counts are 0 in most calls: adding 0 changes nothing)
                tokens.inc(n)
                by_model.inc(n)
        if usage.cost_usd:
            self.cost.labels(*pair).inc(usage.cost_usd)

    def tool_call(self, tool: str, outcome: str, *, duration_s: float) -> None:
        t = self._tool(tool)
        self.tool_calls.labels(t, _bounded(outcome, "tool_outcome")).inc()
        self.tool_duration.labels(t).observe(duration_s)

    def tool_retry(self, tool: str) -> None:
        self.tool_retries.labels(self._tool(tool)).inc()

    def tool_served_from_record(self, tool: str) -> None:
        self.tool_from_record.labels(self._tool(tool)).inc()

    def tool_reexecuted(self, tool: str) -> None:
        self.reexecuted.labels(self._tool(tool)).inc()

    def mcp_call(self, server: str, outcome: str, duration_s: float) -> None:
        s = server if server in self._mcp_servers else OTHER
        self.mcp_calls.labels(s, _bounded(outcome, "mcp_outcome")).inc()
        self.mcp_duration.labels(s).observe(duration_s)

    def event_published(self, kind: str, count: int = 1) -> None:
        kid = self._event_kids.get(kind)
        (kid if kid is not None else self._event_kids[OTHER]).inc(count)

    def append_refused(self, reason: str) -> None:
        self.refused.labels(_bounded(reason, "reason.refused")).inc()

    def compaction(self, reason: str) -> None:
        self.compactions.labels(_bounded(reason, "reason.compaction")).inc()

    def compaction_removed(self, *, messages: int, tokens: int) -> None:
        self.compaction_messages.inc(messages)
        self.compaction_tokens.inc(tokens)

    def cache_breaking_compaction(self, agent: str) -> None:
        known = any(a == agent for a, _ in self._models)
        self.cache_breaking_compactions.labels(agent if known else OTHER).inc()

    def state_time(self, state: str, seconds: float) -> None:
        kid = self._state_kids.get(state)
        (kid if kid is not None else self._state_kids[OTHER]).observe(seconds)

    def capacity_waited(self, seconds: float) -> None:
        self.capacity_wait.observe(seconds)

    def throttled(self, reason: str) -> None:
        self.throttled_calls.labels(_bounded(reason, "reason.throttled")).inc()

    def lane_changed(self, reason: str) -> None:
        self.lane_changes.labels(_bounded(reason.split(":")[0].split(" ")[0], "reason.lane")).inc()

    def runs_redispatched(self, reason: str, count: int = 1) -> None:
        self.redispatched.labels(_bounded(reason, "reason.redispatch")).inc(count)

    def children_started(self, count: int = 1) -> None:
        self.kids_started.inc(count)

    def children_ended(self, count: int = 1) -> None:
        self.kids_ended.inc(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)


_DIRECTIONS = ("input", "output", "cache_read", "cache_write")  # tokens_used's order: Usage's counts
_SETS = {label: frozenset(values) for label, values in LABELS.items()}


def _bounded(value: str, label: str) -> str:
    return value if value in _SETS[label] else OTHER


def retry_reason_label(reason: str) -> str:
    if reason in RETRY_REASONS:
        return reason
    return "http_other" if reason.startswith("http") else "other"
