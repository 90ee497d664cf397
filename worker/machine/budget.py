"""Run budgets (``RunInput.budget``, narrowed by the profile's): can the run afford its next model call?

A call's worst case is its prompt estimate plus the model's maxTokens, and their cost by the model's
pricing with no prompt token cheaper than the input price (none read from a cache; each maybe
written to it, at the dearer price): the call's actual cost, cache reads at their price, is settled
after it. The run affords the call when what it spent so far (``RunState.usage``) plus that worst
case stays within each limit; else it ends ``failed`` with ``budget_exceeded`` before the call, so it
never exceeds its budget. Pure: both the usage and the budget are in the state.

A run's child runs (sub-agents) spend from its budget: what its ended children spent
(``RunState.children_usage``, delivered with their results) counts with its own usage, and each child
is started with an equal share of what is left (``share`` of ``remainder``) as its own budget: the
children of one round together may spend no more than the parent has left, and what a child leaves
unspent is the parent's again once it ends (the parent counts what its children spent, not their
shares). A child's children share its budget the same way, so nesting cannot multiply a budget.

A cost budget on a model with no price cannot be kept: the run ends ``failed`` with ``unpriced_model``
before its first call (a submission asking for it is refused first; this catches a profile changed
since, and a priced parent's child of an unpriced profile).
"""

from __future__ import annotations

import math

from agentmill_client.models import Budget, Message, RunError, Usage
from worker.core import policy
from worker.core.config import RunConfig
from worker.machine.state import RunState

__all__ = [
    "BUDGET_EXCEEDED",
    "UNPRICED_MODEL",
    "remainder",
    "share",
    "spent_with_children",
    "unaffordable",
    "worst_case",
]

BUDGET_EXCEEDED = "budget_exceeded"
UNPRICED_MODEL = "unpriced_model"  # a cost budget on a model with no price


def worst_case(cfg: RunConfig, messages: list[Message], provider: int = 0) -> tuple[int, int, float | None]:
    """(prompt estimate, maxTokens, their cost in USD or None without pricing) of a call on the
    chain's provider number ``provider`` (0: the primary, or the profile's one provider)."""
    prompt = policy.estimate_tokens(messages)
    out = cfg.link_reserve(provider)
    pricing = cfg.link_pricing(provider)
    cost = pricing.worst_case_usd(prompt, out) if pricing is not None else None
    return prompt, out, cost


def spent_with_children(s: RunState) -> Usage:
    """What the run's budget counts: its own usage and its ended children's."""
    return s.usage if s.children_usage is None else s.usage + s.children_usage


def remainder(s: RunState) -> Budget | None:
    """What the run's budget has left for a child (each limit minus what was spent, at least the
    smallest budget there is, so a child of a spent parent is refused at its first call); None: no budget."""
    b = s.cfg.budget
    if b is None:
        return None
    spent = spent_with_children(s)
    tokens = None if b.max_tokens is None else max(1, b.max_tokens - spent.input_tokens - spent.output_tokens)
    cost = None if b.max_cost_usd is None else max(1e-9, round(b.max_cost_usd - (spent.cost_usd or 0.0), 9))
    return Budget(max_tokens=tokens, max_cost_usd=cost)


def share(b: Budget | None, n: int) -> Budget | None:
    """One of ``n`` children's budget out of ``b`` (each limit divided, rounded down; at least the
    smallest budget there is, so a child of a spent parent is refused at its first call)."""
    if b is None or n <= 1:
        return b
    tokens = None if b.max_tokens is None else max(1, b.max_tokens // n)
    cost = None if b.max_cost_usd is None else max(1e-9, math.floor(b.max_cost_usd * 1e9 / n) / 1e9)
    return Budget(max_tokens=tokens, max_cost_usd=cost)


def unaffordable(
    cfg: RunConfig, spent_tokens: int, spent_cost: float | None, messages: list[Message], provider: int = 0
) -> RunError | None:
    """Why the run cannot afford a call with this prompt on that provider (the figures: spent,
    reserved, limit), or None."""
    b = cfg.budget
    if b is None:
        return None
    prompt, out, cost = worst_case(cfg, messages, provider)
    need = prompt + out
    if b.max_tokens is not None and spent_tokens + need > b.max_tokens:
        return RunError(
            code=BUDGET_EXCEEDED,
            message=f"budget.maxTokens={b.max_tokens}: spent {spent_tokens} tokens, the next model call "
            f"reserves {need} (prompt ~{prompt} + maxTokens {out}); {spent_tokens + need} > {b.max_tokens}",
        )
    spent_usd = spent_cost or 0.0
    if (
        b.max_cost_usd is not None and cost is None
    ):  # (its submission was refused so; a profile changed since)
        return RunError(
            code=UNPRICED_MODEL,
            message=f"budget.maxCostUsd={b.max_cost_usd}: the model has no price (neither the profile's "
            "pricing nor the price table gives one), so the cost of its calls cannot be counted",
        )
    if b.max_cost_usd is not None and cost is not None and spent_usd + cost > b.max_cost_usd:
        return RunError(
            code=BUDGET_EXCEEDED,
            message=f"budget.maxCostUsd={b.max_cost_usd}: spent ${spent_usd:.6f}, the next model call "
            f"reserves ${cost:.6f}; ${spent_usd + cost:.6f} > ${b.max_cost_usd}",
        )
    return None
