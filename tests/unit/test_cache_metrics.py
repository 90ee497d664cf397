"""agentmill_cache_breaking_compactions_total{agent}: a child per configured agent at 0 from the
start; a compaction that removed messages counts once for its agent (an unknown one as other)."""

from __future__ import annotations

from agentmill_client.models import EventKind
from tests.integration.helpers import metric_samples
from worker.machine import Emit
from worker.runner import hearing
from worker.telemetry.metrics import MetricsObserver

NAME = "agentmill_cache_breaking_compactions_total"


def _compaction(removed: int) -> Emit:
    return Emit(
        EventKind.COMPACTION, {"reason": "threshold", "removed": removed, "messages": 9, "removedTokens": 40}
    )


def test_cache_breaking_compactions_by_agent() -> None:
    obs = MetricsObserver(models=[("coder", "claude-x"), ("coder", "gpt-y"), ("helper", "m")])
    m = metric_samples(obs.render().decode())
    for agent in ("coder", "helper", "other"):
        assert m[(NAME, (("agent", agent),))] == 0
    hearing.emitted(obs, _compaction(5), resumed=False, agent="coder")
    hearing.emitted(obs, _compaction(0), resumed=False, agent="coder")  # nothing rewritten
    hearing.emitted(obs, _compaction(3), resumed=False, agent="not-configured")
    m = metric_samples(obs.render().decode())
    assert m[(NAME, (("agent", "coder"),))] == 1
    assert m[(NAME, (("agent", "helper"),))] == 0
    assert m[(NAME, (("agent", "other"),))] == 1
