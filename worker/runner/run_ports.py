"""What one run's driver is given to reach the world: its ports, with their plain defaults."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from worker.adapters.plain import NoBudgets, SystemClock
from worker.core.commit_step import JobEnd
from worker.ports import (
    BudgetPort,
    Clock,
    EconomyPort,
    ModelPort,
    Rng,
    RunStore,
    SessionStore,
    ToolCache,
    ToolPort,
)

__all__ = ["RunPorts"]


@dataclass(slots=True)
class RunPorts:
    """What one run's driver is given to reach the world."""

    store: RunStore
    sessions: SessionStore
    models: ModelPort
    tools: ToolPort
    clock: Clock = field(default_factory=SystemClock)
    rng: Rng = field(default_factory=random.Random)
    cache: ToolCache | None = None  # the tool-result cache; None: no tool is cached
    budgets: BudgetPort = field(default_factory=NoBudgets)  # tenants' day budgets
    economy: EconomyPort | None = None  # the economy lane; None: every call on the standard lane
    # arq's finish of the run's job for what the job returns, for its ending commit to write (None:
    # the worker finishes the job after it, worker/process/finisher.py)
    job_end: Callable[[str], JobEnd] | None = None
