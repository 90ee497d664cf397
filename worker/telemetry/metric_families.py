"""The worker's metric families, defined once: names, help, labels and buckets, and the values
each label may take (``LABELS``). The observer that feeds them is worker/telemetry/metrics.py.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from agentmill_client.models import EventKind
from agentmill_client.statuses import TERMINAL
from shared.calls.dispatch import RedispatchReason
from shared.calls.limits import CapacityVerdict
from shared.provider_config import FALLBACK_CLASSES
from worker.core.policy import RETRYABLE_STATUSES
from worker.machine import TRANSITIONS
from worker.models.shapes import SHAPES
from worker.telemetry.loop_metrics import Counter, Histogram

__all__ = [
    "ITER_BUCKETS",
    "LABELS",
    "LLM_BUCKETS",
    "OTHER",
    "RETRY_REASONS",
    "RUN_BUCKETS",
    "STATE_BUCKETS",
    "STEPS",
    "TOOL_BUCKETS",
    "EconomyGauges",
    "MetricFamilies",
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
STEPS = sorted({(s, d) for s, row in TRANSITIONS.items() for to in row.values() for d in to if d != s})
# The values each label may take (by label name); every other value is counted as "other".
LABELS: dict[str, tuple[str, ...]] = {
    "resumed": ("false", "true"),
    "status": tuple(sorted(s.value for s in TERMINAL)),
    "outcome": ("success", "error"),
    "reason.retry": (*sorted(RETRY_REASONS), "http_other", OTHER),
    # cache_read and cache_write: the parts of the input read from and written to a prompt cache
    "direction": ("input", "output", "cache_read", "cache_write"),
    "tool_outcome": ("ok", "error", "cached"),
    "mcp_outcome": ("ok", "error", "failed"),  # failed: no answer (unreachable, timeout, MCP error)
    "kind": tuple(k.value for k in EventKind),
    "reason.refused": ("fenced", "duplicate"),
    "reason.compaction": ("threshold", "overflow"),
    "reason.throttled": (*(v.value for v in CapacityVerdict if v is not CapacityVerdict.OK), "http_429"),
    "reason.redispatch": tuple(
        r.value
        for r in (
            RedispatchReason.LEASE_EXPIRED,
            RedispatchReason.JOB_LOST,
            RedispatchReason.ECONOMY_DEADLINE,
            RedispatchReason.MODEL_REPLIED,
        )
    ),
    # why an economy call went to the standard lane (worker/runner/economy_call.py)
    "reason.lane": ("deadline", "expired", "cancelled", "failed", "http", "missing", "economy_full"),
    "state": tuple(s for s in _STATES if s not in TERMINAL),
    "reason.fallback": FALLBACK_CLASSES,
    "shape": SHAPES,
}


class MetricFamilies:
    """The families on one registry (a worker process's, or a test's own)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
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
        self.archive_backlog = Gauge(
            "agentmill_archive_backlog",
            "Finished runs waiting to be archived to PostgreSQL, on every partition (as this worker's "
            "archiver last counted them); alert above AGENTMILL_ARCHIVE_BACKLOG_ALERT.",
            registry=r,
        )
        self.archive_backlog_limit = Gauge(
            "agentmill_archive_backlog_limit",
            "AGENTMILL_ARCHIVE_BACKLOG_ALERT: the archive backlog the AgentmillArchiveBacklog alert fires above.",
            registry=r,
        )
        self.archived = Counter(
            "agentmill_archive_runs", "Finished runs this worker's archiver wrote to PostgreSQL.", registry=r
        )
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
        self.model_fallbacks = Counter(
            "agentmill_model_fallbacks",
            "Model calls moved on to the next provider of their profile's fallback chain, by agent, "
            "the providers' names (from, to) and the failure class (reason).",
            ["agent", "from", "to", "reason"],
            registry=r,
        )
        self.shape_fallbacks = Counter(
            "agentmill_provider_shape_fallbacks",
            "Request shapes an OpenAI-compatible server refused, sent again in the alternative it "
            "takes (once per endpoint and shape in a process's life).",
            ["shape"],
            registry=r,
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
            "Tokens of model calls (the provider's usage, else agentmill's estimate); input counts the "
            "whole prompt, cache_read and cache_write the parts of it read from and written to a prompt cache.",
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
            "Cost of model calls in USD by agent profile and model (the profile's pricing, else the price table's).",
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
            "Estimated tokens (worker.core.policy.estimate_tokens) removed from model input by compaction.",
            registry=r,
        )
        self.cache_breaking_compactions = Counter(
            "agentmill_cache_breaking_compactions",
            "Compactions that rewrote the transcript a provider's prompt cache holds (the calls after"
            " them read less from the cache), by agent.",
            ["agent"],
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
        self.lane_changes = Counter(
            "agentmill_lane_changes",
            "Economy model calls made on the standard lane instead, by reason (deadline, expired, "
            "cancelled, failed, http, missing, economy_full).",
            ["reason"],
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


DISCARDED = ("late", "duplicate", "finished", "unknown_run")  # the verdicts of an answer not kept


class EconomyGauges:
    """What the economy batcher holding an endpoint's lease sees of it (worker/economy/loop.py);
    a worker not holding it reports nothing for it."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        r = registry or CollectorRegistry()
        self.pending = Gauge(
            "agentmill_economy_requests_pending",
            "Economy requests of a provider endpoint waiting for a batch, by endpoint (its hash) and model.",
            ["endpoint", "model"],
            registry=r,
        )
        self.oldest = Gauge(
            "agentmill_economy_oldest_pending_seconds",
            "Age of the oldest economy request waiting for a batch, by endpoint and model.",
            ["endpoint", "model"],
            registry=r,
        )
        self.batches = Gauge(
            "agentmill_economy_batches",
            "Economy batches of an endpoint not yet delivered, by state (closed, creating, submitted).",
            ["endpoint", "state"],
            registry=r,
        )
        self.discarded = Counter(
            "agentmill_economy_answers_discarded",
            "Batch answers not kept, by why: late (the call had gone to the standard lane), duplicate"
            " (delivered again after a takeover), finished (the run had ended), unknown_run.",
            ["reason"],
            registry=r,
        )
        for reason in DISCARDED:  # at 0 from the start: rate() sees the first one
            self.discarded.labels(reason)
        self.cancelled = Counter(
            "agentmill_economy_batches_cancelled",
            "Batches cancelled at the provider once every request of them had left for the standard lane.",
            ["endpoint"],
            registry=r,
        )

    def verdict(self, verdict: str) -> None:
        """A delivery's verdict (worker/economy/run_side.py Deliveries): counted when discarded."""
        if verdict in DISCARDED:
            self.discarded.labels(verdict).inc()
