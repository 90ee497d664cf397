-- KEYS: run, the cache key (keys.Partition.tool_cache), the run's cached keys (keys.Partition.run_cached)
-- ARGV: the cached result (JSON), its ttl s
-- A tool result cached by a run that still exists (a deleted run's worker writes nothing), its key
-- noted with the run for as long as it lives, so the run's deletion (delete_run.lua) deletes it.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ttl)
redis.call('SADD', KEYS[3], KEYS[2])
if redis.call('TTL', KEYS[3]) < ttl then redis.call('EXPIRE', KEYS[3], ttl) end
return 1
