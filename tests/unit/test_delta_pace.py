"""The deltas' pace (worker/core/delta_pace.py): a few streaming runs flush every AGENTMILL_DELTA_FLUSH_MS,
many flush less often so one worker's flushes stay near AGENTMILL_DELTA_FLUSH_PER_S; every piece of
text still goes out, in order."""

from __future__ import annotations

import asyncio

from agentmill_client.models import RunInput
from shared.profiles import AgentProfile
from shared.settings import Settings
from worker.adapters.memory_store import (
    MemoryHost,
    MemoryModels,
    MemoryRun,
    MemoryRunStore,
    MemorySessionStore,
    MemoryTools,
)
from worker.core.delta_pace import DeltaPace
from worker.models.scripted import ScriptedProvider
from worker.runner import RunDriver, RunPorts

TEXT = "word " * 60


def test_the_interval_is_the_flush_ms_until_the_streams_outnumber_the_budget() -> None:
    pace = DeltaPace(50, 1000)
    for n, want in ((0, 0.05), (1, 0.05), (50, 0.05), (100, 0.1), (1000, 1.0)):
        pace.open = n
        assert pace.interval_s() == want


async def _stream_together(runs: int, per_s: int) -> tuple[list[list[str]], list[str], int]:
    """``runs`` runs on one host, each streaming TEXT over 600 ms at once: each run's deltas' texts,
    its final message, and the host's open streams after."""
    host = MemoryHost(
        {"t": AgentProfile(name="t")}, settings=Settings(delta_flush_ms=50, delta_flush_per_s=per_s)
    )
    script = [{"text": TEXT, "delayMs": 600}]
    made = []
    for i in range(runs):
        run_input = RunInput.model_validate({"agent": "t", "runtimeHints": {"script": script},
                                             "inputMessages": [{"role": "user", "content": "go"}]})  # fmt: skip
        run = MemoryRun.submitted(f"run-{i}", run_input)
        sessions = MemorySessionStore()
        ports = RunPorts(MemoryRunStore(run, sessions), sessions,
                         MemoryModels(lambda p: ScriptedProvider(p.provider)), MemoryTools())  # fmt: skip
        made.append((run, RunDriver(host, ports, f"run-{i}", gen=1)))
    assert await asyncio.gather(*(d.run() for _, d in made)) == ["completed"] * runs
    deltas = [[p["text"] for p in run.payloads("model_delta")] for run, _ in made]
    answers = [run.payloads("assistant_message")[-1]["message"]["content"] for run, _ in made]
    return deltas, answers, host.pace.open


async def test_many_runs_streaming_at_once_flush_less_often_and_lose_no_text() -> None:
    free, free_answers, free_open = await _stream_together(12, per_s=1000)  # 12 streams: 50 ms each
    paced, paced_answers, paced_open = await _stream_together(12, per_s=12)  # 12 streams: 1 s each
    assert free_open == paced_open == 0  # every stream counted out again
    for texts, answer in (*zip(free, free_answers, strict=True), *zip(paced, paced_answers, strict=True)):
        assert "".join(texts) == answer == TEXT
    assert min(len(t) for t in free) >= 6, [len(t) for t in free]  # 600 ms at 50 ms
    assert max(len(t) for t in paced) <= 2, [len(t) for t in paced]  # the interval outlasts the reply
