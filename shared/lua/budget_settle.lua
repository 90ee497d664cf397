-- Settle a model call against its tenant's day budget (budget.lua) when the run's own commit cannot
-- (the tenant's budget lives in another slot than the run).
-- KEYS: the day's budget hash, its holds zset
-- ARGV: the hold's member ('holdId|tokens|nanoUsd'), actual tokens, actual nano-USD, keys' ttl ms
return budget_settle(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
