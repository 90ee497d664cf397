"""The batchers a worker process runs as a side loop (app/worker.py): one per provider endpoint an
economy profile uses, each competing for that endpoint's lease, so that one worker pool-wide sends
an endpoint's batches and any other takes over when it dies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from shared.fields import EconomyBatchState as ES
from shared.partitions import Partitions
from shared.profiles import AgentProfile
from shared.provider_config import ProviderConfig
from shared.scripts import Scripts
from shared.settings import Settings
from worker.economy.anthropic_batches import AnthropicBatches
from worker.economy.batcher import Batcher, BatcherConfig
from worker.economy.openai_batches import OpenAIBatches
from worker.economy.provider import BatchProvider
from worker.economy.run_side import Deliveries
from worker.economy.store import EconomyStore
from worker.economy.wire import batch_endpoint
from worker.models.openai import load_key
from worker.telemetry.metric_families import EconomyGauges

__all__ = ["batch_endpoints", "run_batchers"]

log = logging.getLogger("agentmill.economy")


def batch_endpoints(profiles: dict[str, AgentProfile]) -> dict[str, tuple[ProviderConfig, list[str]]]:
    """endpoint hash -> (a provider config of it, its models) over the providers economy profiles allow."""
    out: dict[str, tuple[ProviderConfig, list[str]]] = {}
    for p in profiles.values():
        for name, cfg in zip(p.provider_names(), p.chain, strict=True):
            if p.economy.allows(name, cfg.kind) and cfg.base_url and cfg.model:
                _, models = out.setdefault(batch_endpoint(cfg), (cfg, []))
                if cfg.model not in models:
                    models.append(cfg.model)
    return out


def provider_of(pcfg: ProviderConfig) -> BatchProvider:
    """The batch endpoint of a provider, spoken as its kind speaks it."""
    kind = AnthropicBatches if pcfg.kind == "anthropic" else OpenAIBatches
    return kind(pcfg.base_url or "", load_key(pcfg))


def config_of(s: Settings) -> BatcherConfig:
    return BatcherConfig(
        batch_requests=s.economy_batch_requests,
        batch_age_s=s.economy_batch_age_s,
        poll_min_s=s.economy_poll_min_s,
        poll_max_s=s.economy_poll_max_s,
        lease_ms=s.economy_lease_ms,
    )


def show(b: Batcher, gauges: EconomyGauges) -> None:
    """The gauges of one endpoint as its batcher last saw it (nothing when it does not hold it),
    and the batches it cancelled since the last pass."""
    child = gauges.cancelled.labels(b.endpoint)
    child.inc(b.cancelled - child.value)
    for model in b.models:
        n, age = b.open_seen.get(model, (0, 0.0))
        if b.held:
            gauges.pending.labels(b.endpoint, model).set(n)
            gauges.oldest.labels(b.endpoint, model).set(age)
        else:
            with contextlib.suppress(KeyError):
                gauges.pending.remove(b.endpoint, model)
                gauges.oldest.remove(b.endpoint, model)
    for state in ES:
        if b.held:
            gauges.batches.labels(b.endpoint, state.value).set(b.batches_seen.get(state.value, 0))
        else:
            with contextlib.suppress(KeyError):
                gauges.batches.remove(b.endpoint, state.value)


async def run_batchers(
    parts: Partitions[Any],
    settings: Settings,
    profiles: dict[str, AgentProfile],
    hit: Callable[[str], None],
    registry: CollectorRegistry | None = None,
) -> None:
    endpoints = batch_endpoints(profiles)
    if not endpoints or not settings.economy_batcher:
        return
    scripts = Scripts.for_settings(parts.client(parts.parts[0]), settings)
    store = EconomyStore(scripts, parts.call_key)
    gauges = EconomyGauges(registry)
    deliver = Deliveries(parts, scripts, gauges.verdict)
    holder = uuid.uuid4().hex
    cfg = config_of(settings)
    batchers = [
        Batcher(store, ep, models, provider_of(pcfg), deliver, holder, cfg, hit)
        for ep, (pcfg, models) in endpoints.items()
    ]
    for b in batchers:
        gauges.cancelled.labels(b.endpoint)
    tick = max(0.05, min(1.0, cfg.batch_age_s / 4, cfg.poll_min_s / 2, cfg.lease_ms / 3000))
    try:
        while True:
            for b in batchers:
                try:
                    await b.step()
                except asyncio.CancelledError:
                    raise
                except Exception:  # a provider or Redis fault: the next pass tries again
                    log.exception("economy batcher of endpoint %s", b.endpoint)
                show(b, gauges)
            await asyncio.sleep(tick * random.uniform(0.8, 1.2))
    finally:
        for b in batchers:
            with contextlib.suppress(Exception):
                await b.provider.aclose()
