-- Settle a model call against its tenant's day budget (budget.lua) when the run's own commit cannot
-- (the tenant's budget lives in another slot than the run).
-- The call: shared.calls.budgets.BudgetSettle.
return budget_settle(KEY.BUDGET, KEY.HOLDS, ARG.MEMBER, ARG.TOKENS, ARG.NANO_USD, ARG.TTL_MS)
