"""A run's driver, and all it holds (its state, its commits, its effects' bookkeeping), is freed by
reference counting when its job ends: no reference cycle leaves it to the collector, whose passes
over a thousand runs' leftovers a worker pays for in CPU and memory."""

from __future__ import annotations

import gc
import weakref

from agentmill_client.models import RunInput
from shared.profiles import AgentProfile
from worker.adapters.memory_store import (
    MemoryHost,
    MemoryModels,
    MemoryRun,
    MemoryRunStore,
    MemorySessionStore,
    MemoryTools,
)
from worker.models.scripted import ScriptedProvider
from worker.runner import RunDriver, RunPorts


async def test_a_finished_runs_driver_is_freed_without_the_collector() -> None:
    host = MemoryHost({"t": AgentProfile(name="t", tools=[])})
    models = MemoryModels(lambda p: ScriptedProvider(p.provider))
    tools = MemoryTools()
    run_input = RunInput.model_validate(
        {
            "agent": "t",
            "runtimeHints": {"script": [{"text": "hi"}]},
            "inputMessages": [{"role": "user", "content": "go"}],
        }
    )
    run = MemoryRun.submitted("run-1", run_input)
    sessions = MemorySessionStore()
    sessions.runs["run-1"] = run
    ports = RunPorts(MemoryRunStore(run, sessions), sessions, models, tools)
    gc.collect()
    gc.disable()
    try:
        driver = RunDriver(host, ports, "run-1", gen=1)
        assert await driver.run() == "completed"
        gone, commits = weakref.ref(driver), weakref.ref(driver.out)
        del driver
        assert gone() is None and commits() is None
    finally:
        gc.enable()
