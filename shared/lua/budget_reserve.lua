-- A tenant's day budget (tokensPerDay, costUsdPerDay), at its home partition: reserve a model
-- call's worst case before the call. Holds that expired unsettled (their worker died between this
-- and budget_settle) are released first, so a dead worker's hold never blocks the tenant for long.
-- Costs are integers of nano-USD (1e-9), so sums are exact. One HSET of the sums, not an HINCRBY
-- each: this runs before every model call of a budgeted tenant.
-- KEYS: the day's budget hash (BUDGET.*), its holds zset (member 'holdId|tokens|nanoUsd' -> expiry ms)
-- ARGV: hold id, tokens, nano-USD, tokensPerDay (0 = none), nano-USD per day (0 = none),
--       hold ms (how long an unsettled hold lives), keys' ttl ms
-- Returns {'ok'} | {'refused', 'tokens'|'cost', spent, held, this call, limit}; a refusal is counted
-- (BUDGET.REFUSED): from then on the day counts as spent and submissions are refused (admission).
local now = now_ms()
local h = redis.call('HMGET', KEYS[1], BUDGET.SPENT_TOKENS, BUDGET.HELD_TOKENS, BUDGET.SPENT_COST,
  BUDGET.HELD_COST, BUDGET.RELEASED, BUDGET.REFUSED)
local spent_t, held_t = tonumber(h[1] or '0'), tonumber(h[2] or '0')
local spent_c, held_c = tonumber(h[3] or '0'), tonumber(h[4] or '0')
local released, refused = tonumber(h[5] or '0'), tonumber(h[6] or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #expired > 0 then
  for _, m in ipairs(expired) do
    local mt, mc = string.match(m, '|(%d+)|(%d+)$')
    held_t = held_t - tonumber(mt); held_c = held_c - tonumber(mc)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  released = released + #expired
end
local tokens, cost = tonumber(ARGV[2]), tonumber(ARGV[3])
local tpd, cpd = tonumber(ARGV[4]), tonumber(ARGV[5])
local verdict = nil
if tpd > 0 and spent_t + held_t + tokens > tpd then
  verdict = {'refused', 'tokens', spent_t, held_t, tokens, tpd}
elseif cpd > 0 and spent_c + held_c + cost > cpd then
  verdict = {'refused', 'cost', spent_c, held_c, cost, cpd}
end
if verdict then
  refused = refused + 1
else
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[6]), ARGV[1] .. '|' .. ARGV[2] .. '|' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
  held_t = held_t + tokens; held_c = held_c + cost
end
redis.call('HSET', KEYS[1], BUDGET.HELD_TOKENS, held_t, BUDGET.HELD_COST, held_c, BUDGET.RELEASED, released,
  BUDGET.REFUSED, refused)
if not h[1] and not h[2] then redis.call('PEXPIRE', KEYS[1], ARGV[7]) end  -- the day's first write
return verdict or {'ok'}
