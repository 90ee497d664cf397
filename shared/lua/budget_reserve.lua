-- A tenant's day budget (tokensPerDay, costUsdPerDay), at its home partition: reserve a model
-- call's worst case before the call. Holds that expired unsettled (their worker died between this
-- and budget_settle) are released first, so a dead worker's hold never blocks the tenant for long.
-- Costs are integers of nano-USD (1e-9), so sums are exact. One HSET of the sums, not an HINCRBY
-- each: this runs before every model call of a budgeted tenant.
-- Once a call of the day used more than it held (budget.lua), the day's later holds are multiplied by
-- the highest such ratio (BUDGET.OVERCOUNT): a provider counting more than the hold sees overspends
-- by one hold's excess per call in flight, not by its excess on every call.
-- The call: shared.calls.budgets.BudgetReserve (the holds zset: member 'holdId|scale|tokens|nanoUsd' ->
-- expiry ms; scale: BUDGET.OVERCOUNT when held, __SCALE_ONE__ = none).
-- Returns {V.OK, member} | {V.REFUSED, LIMIT.TOKENS|LIMIT.COST, spent, held, this call, limit, scale}; a refusal is counted
-- (BUDGET.REFUSED): from then on the day counts as spent and submissions are refused (admission).
local now = now_ms()
local h = redis.call('HMGET', KEY.BUDGET, BUDGET.SPENT_TOKENS, BUDGET.HELD_TOKENS, BUDGET.SPENT_COST,
  BUDGET.HELD_COST, BUDGET.RELEASED, BUDGET.REFUSED, BUDGET.OVERCOUNT)
local spent_t, held_t = tonumber(h[1] or '0'), tonumber(h[2] or '0')
local spent_c, held_c = tonumber(h[3] or '0'), tonumber(h[4] or '0')
local released, refused = tonumber(h[5] or '0'), tonumber(h[6] or '0')
local expired = redis.call('ZRANGEBYSCORE', KEY.HOLDS, '-inf', now)
if #expired > 0 then
  for _, m in ipairs(expired) do
    local mt, mc = string.match(m, '|(%d+)|(%d+)$')
    held_t = held_t - tonumber(mt); held_c = held_c - tonumber(mc)
  end
  redis.call('ZREMRANGEBYSCORE', KEY.HOLDS, '-inf', now)
  released = released + #expired
end
local scale = math.max(__SCALE_ONE__, tonumber(h[7] or __SCALE_ONE__))
local tokens = math.ceil(tonumber(ARG.TOKENS) * scale / __SCALE_ONE__)
local cost = math.ceil(tonumber(ARG.NANO_USD) * scale / __SCALE_ONE__)
local member = ARG.HOLD_ID .. string.format('|%d|%d|%d', scale, tokens, cost)
local tpd, cpd = tonumber(ARG.TOKENS_PER_DAY), tonumber(ARG.NANO_USD_PER_DAY)
local verdict = nil
if tpd > 0 and spent_t + held_t + tokens > tpd then
  verdict = {V.REFUSED, LIMIT.TOKENS, spent_t, held_t, tokens, tpd, scale}
elseif cpd > 0 and spent_c + held_c + cost > cpd then
  verdict = {V.REFUSED, LIMIT.COST, spent_c, held_c, cost, cpd, scale}
end
if verdict then
  refused = refused + 1
else
  redis.call('ZADD', KEY.HOLDS, now + tonumber(ARG.HOLD_MS), member)
  redis.call('PEXPIRE', KEY.HOLDS, ARG.TTL_MS)
  held_t = held_t + tokens; held_c = held_c + cost
end
redis.call('HSET', KEY.BUDGET, BUDGET.HELD_TOKENS, held_t, BUDGET.HELD_COST, held_c, BUDGET.RELEASED, released,
  BUDGET.REFUSED, refused)
if not h[1] and not h[2] then redis.call('PEXPIRE', KEY.BUDGET, ARG.TTL_MS) end  -- the day's first write
return verdict or {V.OK, member}
