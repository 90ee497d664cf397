"""The worker's Prometheus metrics, fed only by the runner's observer hooks (worker/observer.py).

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

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import generate_latest

from agentmill_client.models import EventKind, Usage
from agentmill_client.statuses import TERMINAL
from worker.config import RECALL_TOOL
from worker.history_tools import LOAD_OLDER_HISTORY, SEARCH_HISTORY
from worker.machine import TRANSITIONS
from worker.policy import RETRYABLE_STATUSES

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


LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
RUN_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600, 14400)
ITER_BUCKETS = (1, 2, 3, 5, 8, 13, 21, 34, 55, 100)
STATE_BUCKETS = (0.01, 0.05, 0.25, 1, 5, 15, 60, 300, 1800, 3600, 14400, 86400)
TOOL_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
OTHER = "other"

# A fixed set of label values: a provider's status code must not mint a new time series each.
RETRY_REASONS = frozenset(
    {"connection", "timeout", "stream", "overflow", "invalid", "internal"}
    | {f"http_{code}" for code in RETRYABLE_STATUSES}
)
_STATES = sorted({*TRANSITIONS, *(d for row in TRANSITIONS.values() for to in row.values() for d in to)})
_STEPS = sorted({(s, d) for s, row in TRANSITIONS.items() for to in row.values() for d in to if d != s})
# The values each label may take (by label name); every other value is counted as "other".
LABELS: dict[str, tuple[str, ...]] = {
    "resumed": ("false", "true"),
    "status": tuple(sorted(s.value for s in TERMINAL)),
    "outcome": ("success", "error"),
    "reason.retry": (*sorted(RETRY_REASONS), "http_other", OTHER),
    "direction": ("input", "output"),
    "tool_outcome": ("ok", "error", "cached"),
    "mcp_outcome": ("ok", "error", "failed"),  # failed: no answer (unreachable, timeout, MCP error)
    "kind": tuple(k.value for k in EventKind),
    "reason.refused": ("fenced", "duplicate"),
    "reason.compaction": ("threshold", "overflow"),
    "reason.throttled": ("concurrency", "requests", "tokens", "paused", "http_429"),
    "reason.redispatch": ("lease_expired", "job_lost"),
    "state": tuple(s for s in _STATES if s not in TERMINAL),
}


class MetricsObserver:
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
    ) -> None:
        self._models = frozenset(models)  # (agent, model) pairs of the configured profiles
        r = self.registry = registry or CollectorRegistry()
        self.runs_started = Counter(
            "agentmill_runs_started",
            "Runs started by a job (resumed = from a checkpoint).",
            ["resumed"],
            registry=r,
        )
        self.runs_finished = Counter(
            "agentmill_runs_finished", "Runs that ended, by status.", ["status"], registry=r
        )
        self.iterations = Histogram(
            "agentmill_run_iterations", "Model replies per finished run.", buckets=ITER_BUCKETS, registry=r
        )
        self.run_duration = Histogram(
            "agentmill_run_duration_seconds",
            "Time a job spent driving a run to its end.",
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.in_progress = Gauge("agentmill_runs_in_progress", "Runs this worker is driving now.", registry=r)
        self.redispatched = Counter(
            "agentmill_runs_redispatched",
            "Runs put back on the queue by the reconciler: their worker's lease expired (the run is "
            "retried from its checkpoint) or their job was lost before a worker took it.",
            ["reason"],
            registry=r,
        )
        self.resumed = Counter("agentmill_runs_resumed", "Runs resumed from a checkpoint.", registry=r)
        self.kids_started = Counter(
            "agentmill_children_started",
            "Child runs (sub-agents) this worker created for its parents.",
            registry=r,
        )
        self.kids_ended = Counter(
            "agentmill_children_ended",
            "Child runs whose ending this worker delivered to their parent (once per child).",
            registry=r,
        )
        self.model_calls = Counter(
            "agentmill_model_calls", "Model calls by outcome.", ["outcome"], registry=r
        )
        self.model_retries = Counter(
            "agentmill_model_retries", "Model-call retries by reason.", ["reason"], registry=r
        )
        self.model_latency = Histogram(
            "agentmill_model_call_duration_seconds", "Model call duration.", buckets=LLM_BUCKETS, registry=r
        )
        self.ttft = Histogram(
            "agentmill_model_time_to_first_token_seconds",
            "Time to the first streamed chunk.",
            buckets=LLM_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "agentmill_model_tokens",
            "Tokens of model calls (the provider's usage, else agentmill's estimate).",
            ["direction"],
            registry=r,
        )
        self.usage_tokens = Counter(
            "agentmill_model_usage_tokens",
            "Tokens of model calls by agent profile and model (unconfigured pairs: other).",
            ["agent", "model", "direction"],
            registry=r,
        )
        self.cost = Counter(
            "agentmill_model_cost_usd",
            "Cost of model calls in USD by agent profile and model (the profile's pricing).",
            ["agent", "model"],
            registry=r,
        )
        self.tool_calls = Counter(
            "agentmill_tool_calls", "Tool executions by tool and outcome.", ["tool", "outcome"], registry=r
        )
        self.tool_duration = Histogram(
            "agentmill_tool_call_duration_seconds",
            "Tool execution time.",
            ["tool"],
            buckets=TOOL_BUCKETS,
            registry=r,
        )
        self.tool_retries = Counter(
            "agentmill_tool_retries", "Retries of retryable tool failures.", ["tool"], registry=r
        )
        self.tool_from_record = Counter(
            "agentmill_tool_results_from_record",
            "Tool results served from the idempotency record instead of re-executed.",
            ["tool"],
            registry=r,
        )
        self.reexecuted = Counter(
            "agentmill_tool_calls_reexecuted",
            "Claimed tool calls executed again because their worker died mid-call.",
            ["tool"],
            registry=r,
        )
        self.events = Counter(
            "agentmill_events_published", "RunEvents appended, by kind.", ["kind"], registry=r
        )
        self.refused = Counter(
            "agentmill_appends_refused",
            "Writes refused by the store (duplicate seq or stale epoch).",
            ["reason"],
            registry=r,
        )
        self.compactions = Counter(
            "agentmill_compactions", "Context compactions by reason.", ["reason"], registry=r
        )
        self.compaction_messages = Counter(
            "agentmill_compaction_removed_messages", "Messages replaced by compaction summaries.", registry=r
        )
        self.compaction_tokens = Counter(
            "agentmill_compaction_removed_tokens",
            "Estimated tokens (worker.policy.estimate_tokens) removed from model input by compaction.",
            registry=r,
        )
        self.state_seconds = Histogram(
            "agentmill_state_duration_seconds",
            "Time a run spent in a machine state before leaving it (waits for humans and clients included).",
            ["state"],
            buckets=STATE_BUCKETS,
            registry=r,
        )
        self.transitions = Counter(
            "agentmill_state_transitions", "Machine transitions.", ["from_state", "to_state"], registry=r
        )
        self.capacity_wait = Histogram(
            "agentmill_provider_capacity_wait_seconds",
            "Time model calls waited for pool-wide provider capacity (limited endpoints only).",
            buckets=LLM_BUCKETS,
            registry=r,
        )
        self.throttled_calls = Counter(
            "agentmill_provider_throttled",
            "Model calls held back by a provider limit (concurrency, requests, tokens, paused) or "
            "answered 429 (http_429).",
            ["reason"],
            registry=r,
        )
        self.mcp_calls = Counter(
            "agentmill_mcp_calls",
            "MCP tools/call requests by server and outcome (ok, error: the tool answered isError, "
            "failed: no answer: unreachable, timed out, an MCP error).",
            ["server", "outcome"],
            registry=r,
        )
        self.mcp_duration = Histogram(
            "agentmill_mcp_call_duration_seconds",
            "MCP tools/call duration by server (each attempt).",
            ["server"],
            buckets=TOOL_BUCKETS,
            registry=r,
        )
        self._mcp_servers = frozenset(mcp_servers)
        self._tools = frozenset({*tools, RECALL_TOOL, LOAD_OLDER_HISTORY, SEARCH_HISTORY})
        # Children by (metric, label values): ``.labels()`` validates and locks on every call, a
        # few of them per event; the label values are bounded (see above), so is this dict.
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._precreate()

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
        ]  # fmt: skip
        for metric, label in by_one:
            for value in (*LABELS[label], OTHER):
                self._c(metric, value)
        for t in tools:
            for metric in (self.tool_duration, self.tool_retries, self.tool_from_record, self.reexecuted):
                self._c(metric, t)
            for outcome in LABELS["tool_outcome"]:
                self._c(self.tool_calls, t, outcome)
        for server in (*sorted(self._mcp_servers), OTHER):
            self._c(self.mcp_duration, server)
            for outcome in LABELS["mcp_outcome"]:
                self._c(self.mcp_calls, server, outcome)
        for agent, model in (*sorted(self._models), (OTHER, OTHER)):
            self._c(self.cost, agent, model)
            for direction in LABELS["direction"]:
                self._c(self.usage_tokens, agent, model, direction)
        for src, dst in (*_STEPS, (OTHER, OTHER)):
            self._c(self.transitions, src, dst)

    def _c(self, metric: Any, *values: str) -> Any:
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def _tool(self, name: str) -> str:
        return name if name in self._tools else OTHER

    # ---- Observer ----

    def transition(self, src: str, dst: str, event: str) -> None:
        if src != dst:
            known = (src, dst) in _STEP_SET
            self._c(self.transitions, *((src, dst) if known else (OTHER, OTHER))).inc()

    def run_started(self, *, resumed: bool, job_try: int) -> None:
        self._c(self.runs_started, "true" if resumed else "false").inc()
        self.in_progress.inc()
        if resumed:
            self.resumed.inc()

    def run_finished(self, status: str, *, iterations: int, duration_s: float) -> None:
        self._c(self.runs_finished, _bounded(status, "status")).inc()
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
        self._c(self.model_calls, _bounded(outcome, "outcome")).inc()
        self.model_latency.observe(latency_s)
        if ttft_s is not None:
            self.ttft.observe(ttft_s)

    def model_retry(self, reason: str) -> None:
        self._c(self.model_retries, retry_reason_label(reason)).inc()

    def tokens_used(self, usage: Usage, *, agent: str, model: str) -> None:
        pair = (agent, model) if (agent, model) in self._models else (OTHER, OTHER)
        for direction, n in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            self._c(self.tokens, direction).inc(n)
            self._c(self.usage_tokens, *pair, direction).inc(n)
        if usage.cost_usd:
            self._c(self.cost, *pair).inc(usage.cost_usd)

    def tool_call(self, tool: str, outcome: str, *, duration_s: float) -> None:
        t = self._tool(tool)
        self._c(self.tool_calls, t, _bounded(outcome, "tool_outcome")).inc()
        self._c(self.tool_duration, t).observe(duration_s)

    def tool_retry(self, tool: str) -> None:
        self._c(self.tool_retries, self._tool(tool)).inc()

    def tool_served_from_record(self, tool: str) -> None:
        self._c(self.tool_from_record, self._tool(tool)).inc()

    def tool_reexecuted(self, tool: str) -> None:
        self._c(self.reexecuted, self._tool(tool)).inc()

    def mcp_call(self, server: str, outcome: str, duration_s: float) -> None:
        s = server if server in self._mcp_servers else OTHER
        self._c(self.mcp_calls, s, _bounded(outcome, "mcp_outcome")).inc()
        self._c(self.mcp_duration, s).observe(duration_s)

    def event_published(self, kind: str, count: int = 1) -> None:
        self._c(self.events, _bounded(kind, "kind")).inc(count)

    def append_refused(self, reason: str) -> None:
        self._c(self.refused, _bounded(reason, "reason.refused")).inc()

    def compaction(self, reason: str) -> None:
        self._c(self.compactions, _bounded(reason, "reason.compaction")).inc()

    def compaction_removed(self, *, messages: int, tokens: int) -> None:
        self.compaction_messages.inc(messages)
        self.compaction_tokens.inc(tokens)

    def state_time(self, state: str, seconds: float) -> None:
        self._c(self.state_seconds, _bounded(state, "state")).observe(seconds)

    def capacity_waited(self, seconds: float) -> None:
        self.capacity_wait.observe(seconds)

    def throttled(self, reason: str) -> None:
        self._c(self.throttled_calls, _bounded(reason, "reason.throttled")).inc()

    def runs_redispatched(self, reason: str, count: int = 1) -> None:
        self._c(self.redispatched, _bounded(reason, "reason.redispatch")).inc(count)

    def children_started(self, count: int = 1) -> None:
        self.kids_started.inc(count)

    def children_ended(self, count: int = 1) -> None:
        self.kids_ended.inc(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)


_STEP_SET = frozenset(_STEPS)
_SETS = {label: frozenset(values) for label, values in LABELS.items()}


def _bounded(value: str, label: str) -> str:
    return value if value in _SETS[label] else OTHER


def retry_reason_label(reason: str) -> str:
    if reason in RETRY_REASONS:
        return reason
    return "http_other" if reason.startswith("http") else "other"
