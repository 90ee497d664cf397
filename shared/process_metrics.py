"""What every agentmill process's /metrics carries besides its own families: the build it runs
(``agentmill_build_info{version}``, always 1, to join on or to see a rollout's progress) and
prometheus-client's process and Python collectors (``process_*``: CPU, memory, open file
descriptors, start time; ``python_info``; ``python_gc_*``). The API and the worker each keep their
metrics on a registry of their own, where these are not registered unless added here."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, GCCollector, PlatformCollector, ProcessCollector

from agentmill_client import __version__

__all__ = ["BUILD_INFO", "register_process_metrics"]

BUILD_INFO = "agentmill_build_info"


def register_process_metrics(registry: CollectorRegistry) -> None:
    """Registers the build info gauge and the process, platform and GC collectors on ``registry``."""
    build = Gauge(
        BUILD_INFO, "The agentmill version this process runs (always 1).", ["version"], registry=registry
    )
    build.labels(__version__).set(1)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
