"""What every run on one worker process shares (Redis, scripts, profiles, HTTP, the lease), and the
ports each run's driver is given (worker/ports.py): Redis stores, providers, tools."""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from redis.exceptions import RedisError

from shared import keys, netguard
from shared.connections import connections_from
from shared.partitions import Partitions
from shared.profiles import AgentProfile
from shared.provider_config import ProviderConfig
from shared.quotas import Quotas
from shared.scripts import Scripts
from shared.settings import Settings
from worker.adapters.agent_cache import AgentVersions
from worker.adapters.batcher import ScriptBatcher
from worker.adapters.budgets import TenantBudgets
from worker.adapters.lease import WorkerLease
from worker.adapters.limiter import Held, OnWait, ProviderLimiter
from worker.adapters.plain import SystemClock
from worker.adapters.redis_store import RedisRunStore, RedisSessionStore
from worker.adapters.tool_cache import RedisToolCache
from worker.core.config_cache import ConfigCache
from worker.core.delta_pace import DeltaPace
from worker.economy.run_side import RedisRunEconomy
from worker.economy.store import EconomyStore
from worker.models.base import ModelCallError, ModelProvider
from worker.models.scripted import ScriptedProvider
from worker.models.shapes import ShapeMemory
from worker.ports import Failpoints
from worker.process import failpoints as process_failpoints
from worker.runner.run_ports import RunPorts
from worker.telemetry.observer import NullObserver, Observer
from worker.tools.mcp_listings import McpListings, RedisListingStore
from worker.tools.registry import Toolbox

if TYPE_CHECKING:
    from worker.runner import RunDriver

__all__ = ["Providers", "UnknownProfileError", "WorkerDeps", "wait_replicas"]


def wait_replicas(settings: Settings) -> int:
    """Replicas a worker's writes wait for (AGENTMILL_REDIS_WAIT_REPLICAS; 1 on a cluster, else 0)."""
    if settings.redis_wait_replicas is not None:
        return settings.redis_wait_replicas
    return 1 if settings.redis_cluster else 0


class UnknownProfileError(LookupError):
    pass


class Providers:
    """ModelPort: one provider per provider configuration, a profile's or a place in its fallback
    chain (built on first use; a tenant's agents' versions each have their own, at most
    MAX_PROVIDERS kept), capacity through the Redis limiter."""

    MAX_PROVIDERS = 512

    def __init__(
        self, http: httpx.AsyncClient, limiter: ProviderLimiter, observer: Observer | None = None
    ) -> None:
        self.http = http
        self.limiter = limiter
        # id of the configuration -> (the configuration, its provider): an entry is used only for
        # the very object it was built from
        self._providers: dict[int, tuple[ProviderConfig, ModelProvider]] = {}
        # What endpoints were found to refuse a request shape, shared by every profile's providers.
        self.shapes = ShapeMemory(observer.shape_fallback if observer is not None else None)

    def provider(self, profile: AgentProfile, index: int = 0) -> ModelProvider:
        cfg = profile.chain[index]
        hit = self._providers.get(id(cfg))
        if hit is not None and hit[0] is cfg:
            return hit[1]
        p: ModelProvider
        if cfg.kind == "scripted":
            p = ScriptedProvider(cfg)
        elif cfg.kind == "anthropic":
            from worker.models.anthropic import AnthropicProvider

            p = AnthropicProvider(cfg, self.http)
        else:
            from worker.models.openai import OpenAIProvider

            p = OpenAIProvider(cfg, self.http, self.shapes)
        if len(self._providers) >= self.MAX_PROVIDERS:  # the oldest dropped (providers hold nothing to close)
            self._providers.pop(next(iter(self._providers)))
        self._providers[id(cfg)] = (cfg, p)
        return p

    async def hold(self, cfg: ProviderConfig, tokens: int, on_wait: OnWait, priority: int) -> Held:
        try:
            return await self.limiter.hold(cfg, tokens, on_wait, priority)
        except RedisError as exc:
            raise ModelCallError("connection", f"the provider limiter could not reach Redis: {exc}") from None

    async def pause(self, cfg: ProviderConfig, ms: int) -> None:
        with contextlib.suppress(RedisError):
            await self.limiter.pause(cfg, ms)

    async def aclose(self) -> None:
        for _, p in self._providers.values():
            await p.aclose()


@dataclass
class WorkerDeps:
    parts: Partitions[Any]
    settings: Settings
    profiles: dict[str, AgentProfile]
    http: httpx.AsyncClient
    worker_id: str
    observer: Observer = field(default_factory=NullObserver)
    guarded_http: httpx.AsyncClient = field(default_factory=netguard.guarded_client)  # HTTP tools
    lease: WorkerLease | None = None  # the worker's lease deadline; None = unguarded (unit tests)
    lease_id: str = ""  # the id this worker holds its lease and runs under ("" = worker_id)
    configs: ConfigCache = field(default_factory=ConfigCache)  # shared by runs of one profile
    draining: bool = False  # the process is stopping (a run that starts now hands itself back)
    failpoints: Failpoints = process_failpoints  # armed from the settings when the process starts
    scripts: Scripts = field(init=False)
    limiter: ProviderLimiter = field(init=False)
    batcher: ScriptBatcher = field(init=False)  # the runs' commits, pipelined per loop turn
    models: Providers = field(init=False)
    tools: Toolbox = field(init=False)
    sessions: RedisSessionStore = field(init=False)
    economy: EconomyStore = field(init=False)  # the economy lane's requests and batches
    budgets: TenantBudgets = field(init=False)  # tenants' day budgets (tokensPerDay, costUsdPerDay)
    active: dict[str, RunDriver] = field(default_factory=dict)
    pace: DeltaPace = field(init=False)  # the deltas' flush interval over the process's streams
    rng: random.Random = field(default_factory=random.Random)  # retry jitter, one per process
    agents: AgentVersions = field(init=False)  # tenants' agent versions, by (tenant, name, version)

    def __post_init__(self) -> None:
        self.lease_id = self.lease_id or self.worker_id
        self.pace = DeltaPace(self.settings.delta_flush_ms, self.settings.delta_flush_per_s)
        self.scripts = Scripts.for_settings(self.parts.client(self.parts.parts[0]), self.settings)
        self.limiter = ProviderLimiter(
            self.scripts,
            lease_ms=self.settings.provider_slot_lease_ms,
            aging_ms=self.settings.priority_aging_ms,
            on_key=None if self.parts.single else self.parts.call_key,
        )
        self.economy = EconomyStore(self.scripts, self.parts.call_key)
        self.agents = AgentVersions(
            self.parts, connections_from(self.settings.providers, dev=self.settings.dev_profiles)
        )
        self.batcher = ScriptBatcher(self.parts, wait_replicas=wait_replicas(self.settings))
        self.models = Providers(self.http, self.limiter, self.observer)
        # MCP listings kept once for every run: at least as long as a run and its retention
        listings = McpListings(
            RedisListingStore(self.parts.call_key),
            ttl_s=self.settings.retention_s + self.settings.run_duration_max_ms // 1000,
        )
        self.tools = Toolbox(
            self.guarded_http, on_mcp_call=self.observer.mcp_call, watch=True, listings=listings
        )
        self.sessions = RedisSessionStore(self.parts, SystemClock())
        self.budgets = TenantBudgets(
            self.parts, self.scripts, Quotas(self.settings), self.settings.budget_hold_ms
        )

    def profile(self, name: str) -> AgentProfile:
        try:
            return self.profiles[name]
        except KeyError:
            raise UnknownProfileError(f"no profile named {name!r}") from None

    async def agent(self, tenant: str, name: str, version: int) -> AgentProfile:
        return await self.agents.get(tenant, name, version)

    def ports(
        self, part: keys.Partition, run_id: str, claimed: tuple[str, list[Any]] | None = None
    ) -> RunPorts:
        """The ports of one run's driver, on this process's Redis, providers and tools; ``claimed``:
        the lease id the job's claim acquired the run under and what it answered (its store's first
        acquire)."""
        store = RedisRunStore(
            self.parts, self.scripts, self.settings, part, run_id, self.lease, self.batcher, claimed
        )
        cache = RedisToolCache(self.parts, self.scripts, part, run_id)
        economy = RedisRunEconomy(
            self.parts, part, run_id, self.economy, self.settings.economy_max_open, self.budgets
        )
        return RunPorts(
            store,
            self.sessions,
            self.models,
            self.tools,
            SystemClock(),
            self.rng,
            cache,
            self.budgets,
            economy,
        )

    async def aclose(self) -> None:
        await self.batcher.aclose()
        await self.models.aclose()
        await self.tools.aclose()
        await self.guarded_http.aclose()
