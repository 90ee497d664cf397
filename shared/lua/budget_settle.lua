-- Settle a model call against its tenant's day budget: its hold (budget_reserve.lua) is replaced by
-- what the call actually used. A hold already released (it expired first) is not released twice;
-- the actual usage is counted all the same: the call was made.
-- KEYS: the day's budget hash, its holds zset
-- ARGV: the hold's member ('holdId|tokens|nanoUsd'), actual tokens, actual nano-USD, keys' ttl ms
-- Returns 1 when the hold was still there, else 0.
local held = redis.call('ZREM', KEYS[2], ARGV[1])
local h = redis.call('HMGET', KEYS[1], BUDGET.SPENT_TOKENS, BUDGET.HELD_TOKENS, BUDGET.SPENT_COST, BUDGET.HELD_COST)
local spent_t, held_t = tonumber(h[1] or '0') + tonumber(ARGV[2]), tonumber(h[2] or '0')
local spent_c, held_c = tonumber(h[3] or '0') + tonumber(ARGV[3]), tonumber(h[4] or '0')
if held == 1 then
  local mt, mc = string.match(ARGV[1], '|(%d+)|(%d+)$')
  held_t = held_t - tonumber(mt); held_c = held_c - tonumber(mc)
end
redis.call('HSET', KEYS[1], BUDGET.SPENT_TOKENS, spent_t, BUDGET.HELD_TOKENS, held_t, BUDGET.SPENT_COST, spent_c,
  BUDGET.HELD_COST, held_c)
if not h[1] and not h[2] then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end  -- the key had expired or is new
return held
