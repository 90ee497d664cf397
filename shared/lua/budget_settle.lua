-- Settle a model call against its tenant's day budget: its hold (budget_reserve.lua) is replaced by
-- what the call actually used. A hold already released (it expired first) is not released twice;
-- the actual usage is counted all the same: the call was made.
-- KEYS: the day's budget hash, its holds zset
-- ARGV: the hold's member ('holdId|tokens|nanoUsd'), actual tokens, actual nano-USD, keys' ttl ms
-- Returns 1 when the hold was still there, else 0.
local held = redis.call('ZREM', KEYS[2], ARGV[1])
if held == 1 then
  local mt, mc = string.match(ARGV[1], '|(%d+)|(%d+)$')
  -- (never an increment of -0: Redis refuses "-0" as an integer)
  if tonumber(mt) > 0 then redis.call('HINCRBY', KEYS[1], BUDGET.HELD_TOKENS, -tonumber(mt)) end
  if tonumber(mc) > 0 then redis.call('HINCRBY', KEYS[1], BUDGET.HELD_COST, -tonumber(mc)) end
end
redis.call('HINCRBY', KEYS[1], BUDGET.SPENT_TOKENS, ARGV[2])
redis.call('HINCRBY', KEYS[1], BUDGET.SPENT_COST, ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return held
