"""The ports' implementations with nothing behind them: the system's clock, no budgets, no
failpoints (the defaults of a run's ports and of hosts without a worker process)."""

from __future__ import annotations

import time

from shared.clock import now_ms
from worker.ports import BudgetHold

__all__ = ["NoBudgets", "NoFailpoints", "SystemClock"]


class SystemClock:
    # the functions themselves, not methods that call them: a run reads the clock a dozen times
    now_ms = staticmethod(now_ms)
    monotonic = staticmethod(time.monotonic)


class NoBudgets:
    """No tenant has a budget (unit tests, in-memory runs)."""

    def limited(self, tenant: str) -> bool:
        return False

    async def reserve(
        self, tenant: str, hold_id: str, tokens: int, cost_usd: float | None
    ) -> BudgetHold | str:
        raise AssertionError("no tenant has a budget here")


class NoFailpoints:
    """No point is armed (in-memory hosts)."""

    def hit(self, name: str) -> None:
        return None
