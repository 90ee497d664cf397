"""The ports a run's driver talks to the world through: small protocols, with Redis implementations
(worker/adapters/redis_store.py, worker/process/deps.py) and in-memory ones for unit tests (worker/adapters/memory_store.py).

- ``RunStore``: one run at one epoch — acquire, fenced commits (events, checkpoint, tool claims and
  records, the ending), hand-back. Every write is refused once another worker holds the run.
- ``SessionStore``: a session's past run loops, and recall of past tool results.
- ``ModelPort``: the provider of a profile, and the pool-wide capacity of its endpoint.
- ``ToolPort``: the tools of a profile: their specs and their execution.
- ``Clock`` and ``Rng``: wall time and the jitter the machine's retries use.
- ``Host``: what the worker process shares with its runs (its ``Lease``, its ``Failpoints``…).

Protocols only. The values they exchange are in worker/core (acquisition.py, commit_step.py,
store_errors.py, tool_retry.py, economy_answer.py); the implementations with nothing behind them (the
system clock, no budgets, no failpoints) are in worker/adapters/plain.py, the bundle a run's driver is
given in worker/runner/run_ports.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from agentmill_client.models import Message, ToolCall, ToolResult
from shared.children import ChildSpec, Spawned
from shared.profiles import AgentProfile, ContextConfig
from shared.provider_config import ProviderConfig
from shared.settings import Settings
from worker.core.acquisition import Acquired, NotAcquired
from worker.core.commit_step import CommitStep, Entry, Settlement
from worker.core.config import RunConfig, ToolSpec
from worker.core.config_cache import ConfigCache
from worker.core.context import PastCall, RunLoop
from worker.core.delta_pace import DeltaPace
from worker.core.economy_answer import EconomyAnswer
from worker.core.tool_retry import ToolRetry
from worker.models.base import ModelProvider
from worker.telemetry.observer import Observer
from worker.tools.base import ToolContext
from worker.tools.mcp_listings import Relisted

__all__ = [
    "BudgetHold",
    "BudgetPort",
    "Capacity",
    "Clock",
    "EconomyPort",
    "Failpoints",
    "Host",
    "Lease",
    "ModelPort",
    "Rng",
    "RunStore",
    "SessionStore",
    "ToolCache",
    "ToolPort",
]


class RunStore(Protocol):
    epoch: int  # the epoch this handle writes at (0 before acquire)
    last_seq: int  # the last event seq this handle wrote or saw
    slot: int  # the run's cluster slot: a budget settlement in the same slot goes with a commit

    async def acquire(self, gen: int, worker_id: str) -> Acquired | NotAcquired: ...

    async def commit(self, step: CommitStep) -> int:
        """Everything of ``step`` in one fenced write; raises FencedError or SeqConflictError and
        writes nothing."""
        ...

    async def publish(self, events: list[Entry]) -> int:
        """Events alone (at least one), without a checkpoint: ``commit`` with only ``events``, as
        cheap as the store can make it (a model's deltas, several a second while it streams)."""
        ...

    async def release(self, gen: int, *, lost: bool = False) -> str:
        """The run back on the queue (dispatch ``gen`` + 1): at a checkpoint, or (``lost``) stopped
        without writing on the worker's passed lease deadline, if no one has moved it since."""
        ...

    async def start_children(self, specs: list[ChildSpec], lineage: bytes, root: str) -> dict[str, Spawned]:
        """Create this run's child runs (sub-agents), in its tenant and within its tenant's quotas
        (maxActive; maxChildren and maxDescendants of ``root``'s tree): shared/children.py."""
        ...

    async def parent_status(self) -> tuple[str, str]:
        """A child run's parent: its id and its status ('' and '' for a root run, or a parent gone)."""
        ...

    async def hand_off(self) -> dict[str, str]:
        """After the run's ending: its result to its parent, an abort to its children (what the
        ending marked; shared/children.py)."""
        ...


class SessionStore(Protocol):
    async def load_history(self, session_id: str | None, cfg: ContextConfig) -> list[Message]: ...

    async def recall(
        self, session_id: str | None, call: ToolCall, run_id: str | None = None
    ) -> ToolResult: ...

    async def load_past(
        self, session_id: str | None, max_loops: int
    ) -> tuple[list[RunLoop], list[PastCall], dict[str, ToolResult]]:
        """The session's newest ``max_loops`` turns, its newest calls (at most
        sessions.MAX_SEARCHED_CALLS, oldest first; every run's, however it ended), and the tool
        results of both by session call id."""
        ...


OnWait = Callable[[str, int], Awaitable[None]]


class Capacity(Protocol):
    async def release(self, actual_tokens: int | None) -> None: ...


class ModelPort(Protocol):
    def provider(self, profile: AgentProfile, index: int = 0) -> ModelProvider:
        """The provider of the profile's fallback chain at ``index`` (0: the primary)."""
        ...

    async def hold(self, cfg: ProviderConfig, tokens: int, on_wait: OnWait, priority: int) -> Capacity:
        """Wait for pool-wide capacity of a limited endpoint (worker/adapters/limiter.py), in its line at the
        run's ``priority``."""
        ...

    async def pause(self, cfg: ProviderConfig, ms: int) -> None:
        """A 429's Retry-After: no worker calls the endpoint for ``ms``."""
        ...


class BudgetHold(Protocol):
    slot: int  # the cluster slot of the tenant's budget

    async def settle(self, tokens: int, cost_usd: float | None) -> None:
        """Replace the hold by the call's actual usage (0, None: a call that failed)."""
        ...

    def settlement(self, tokens: int, cost_usd: float | None) -> Settlement:
        """The same, for the run's next commit to write (when ``slot`` is the run's)."""
        ...


class BudgetPort(Protocol):
    """A tenant's budget per UTC day, pool-wide (worker/adapters/budgets.py)."""

    def limited(self, tenant: str) -> bool: ...

    async def reserve(
        self, tenant: str, hold_id: str, tokens: int, cost_usd: float | None
    ) -> BudgetHold | str:
        """Hold a call's worst case; a str: why the tenant's day cannot afford it."""
        ...


class ToolPort(Protocol):
    async def specs(self, profile: AgentProfile) -> dict[str, ToolSpec]:
        """The profile's tools as the model is told about them (MCP servers' listed now or as kept)."""
        ...

    async def keep_listings(self, config: RunConfig) -> None:
        """The MCP listings a starting run's tools name, kept for every worker (mcp_listings.py)."""
        ...

    async def fill_listings(
        self, profile: AgentProfile | None, config: RunConfig
    ) -> tuple[RunConfig, list[Relisted]]:
        """A stored configuration's MCP tools with their schemas back, from the listings they name
        (``profile``: the run's, to ask its servers again for a listing no longer kept)."""
        ...

    async def execute(
        self,
        profile: AgentProfile,
        call: ToolCall,
        ctx: ToolContext,
        on_retry: Callable[[ToolRetry], Awaitable[None]] | None = None,
    ) -> ToolResult: ...


class ToolCache(Protocol):
    """Tool results reused by tool, canonical arguments and tenant (worker/adapters/tool_cache.py)."""

    async def get(self, call: ToolCall) -> ToolResult | None: ...

    async def put(self, call: ToolCall, result: ToolResult, ttl_s: int) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall time in unix ms (event times, deadlines)."""
        ...

    def monotonic(self) -> float:
        """Seconds, for durations."""
        ...


class Rng(Protocol):
    def random(self) -> float:
        """Uniform in [0, 1)."""
        ...


class Lease(Protocol):
    """The worker's own lease deadline (worker/adapters/lease.py ``WorkerLease``)."""

    def check(self, what: str) -> None:
        """Raises ``LeaseExpiredError`` past the deadline: ``what`` is not started."""
        ...

    def expired(self) -> bool: ...


class EconomyPort(Protocol):
    """One run's side of the economy lane (worker/economy/run_side.py)."""

    async def answer(self, index: int) -> EconomyAnswer: ...

    async def enqueue(self, endpoint: str, model: str, custom_id: str, line: bytes) -> int:
        """The request line written once into the endpoint's open batch: 1 written, 0 it was
        already, -1 the open batch is full."""
        ...

    async def spent(self, tenant: str, custom_id: str, tokens: int, cost_usd: float | None) -> None:
        """The answered call's usage counted on its tenant's day budget (when the tenant has one)."""
        ...

    async def withdraw(self, endpoint: str, model: str, custom_id: str) -> None:
        """The call went to the standard lane while its request waited: not sent if it is not yet,
        and its batch cancelled at the provider once every request of it left."""
        ...


class Failpoints(Protocol):
    """Named points in a run where a chaos test may have the worker kill itself
    (worker/process/failpoints.py; ``NoFailpoints`` in worker/adapters/plain.py)."""

    def hit(self, name: str) -> None: ...


class Host(Protocol):
    """What the worker process shares with its runs (worker/process/deps.py WorkerDeps)."""

    settings: Settings
    observer: Observer
    lease_id: str
    configs: ConfigCache  # resolved configurations shared by runs that set no knob of their own
    pace: DeltaPace  # how often a streaming run's deltas go out, given how many runs stream
    draining: bool  # the process is stopping: a run that starts now hands itself back at once
    failpoints: Failpoints  # where a chaos test may have the worker kill itself

    @property
    def lease(self) -> Lease | None:
        """The worker's lease deadline; None = unguarded."""
        ...

    def profile(self, name: str) -> AgentProfile: ...

    async def agent(self, tenant: str, name: str, version: int) -> AgentProfile:
        """A version of a tenant's agent (worker/adapters/agent_cache.py); LookupError when it is not kept."""
        ...
