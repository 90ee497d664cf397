-- A model call's settlement on its tenant's day budget (shared by budget_settle.lua and commit.lua,
-- which writes it with the run's step when the tenant's budget shares the run's slot): its hold
-- (budget_reserve.lua) is replaced by what the call actually used. A hold already released (it
-- expired first) is not released twice; the actual usage is counted all the same: the call was made.
-- A call that used more than it held (a provider counting what the hold could not see) raises the
-- day's BUDGET.OVERCOUNT to its ratio, in thousandths of the hold the call would have had unscaled:
-- the member names the scale it was held at ('holdId|scale|tokens|nanoUsd'; one without: __SCALE_ONE__).
-- KEYS: none of its own: the caller passes the day's budget hash and its holds zset (in its KEYS).
-- Returns 1 when the hold was still there, else 0.
local function budget_settle(hash, holds, member, tokens, nano, ttl)
  local held = redis.call('ZREM', holds, member)
  local h = redis.call('HMGET', hash, BUDGET.SPENT_TOKENS, BUDGET.HELD_TOKENS, BUDGET.SPENT_COST, BUDGET.HELD_COST,
    BUDGET.OVERCOUNT)
  local mt, mc = string.match(member, '|(%d+)|(%d+)$')
  mt, mc = tonumber(mt), tonumber(mc)
  local scale = tonumber(string.match(member, '|(%d+)|%d+|%d+$') or __SCALE_ONE__)
  local over = math.max(__SCALE_ONE__, tonumber(h[5] or __SCALE_ONE__))
  local seen = over
  if mt > 0 then seen = math.max(seen, math.ceil(tonumber(tokens) * scale / mt)) end
  if mc > 0 then seen = math.max(seen, math.ceil(tonumber(nano) * scale / mc)) end
  if seen > over then redis.call('HSET', hash, BUDGET.OVERCOUNT, seen) end
  local spent_t, held_t = tonumber(h[1] or '0') + tonumber(tokens), tonumber(h[2] or '0')
  local spent_c, held_c = tonumber(h[3] or '0') + tonumber(nano), tonumber(h[4] or '0')
  if held == 1 then
    held_t = held_t - mt; held_c = held_c - mc
  end
  redis.call('HSET', hash, BUDGET.SPENT_TOKENS, spent_t, BUDGET.HELD_TOKENS, held_t, BUDGET.SPENT_COST, spent_c,
    BUDGET.HELD_COST, held_c)
  if not h[1] and not h[2] then redis.call('PEXPIRE', hash, ttl) end  -- the key had expired or is new
  return held
end
