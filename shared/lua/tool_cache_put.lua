-- A tool result cached by a run that still exists (a deleted run's worker writes nothing), its key
-- noted with the run for as long as it lives, so the run's deletion (delete_run.lua) deletes it.
-- Call: shared.calls.steps.ToolCachePut (KEYS: the run, the cache key keys.Partition.tool_cache, the
-- run's cached keys keys.Partition.run_cached). Returns 1 cached, 0 the run is gone.
if redis.call('EXISTS', KEY.RUN) == 0 then return 0 end
local ttl = tonumber(ARG.TTL_S)
redis.call('SET', KEY.CACHE, ARG.RESULT, 'EX', ttl)
redis.call('SADD', KEY.CACHED, KEY.CACHE)
if redis.call('TTL', KEY.CACHED) < ttl then redis.call('EXPIRE', KEY.CACHED, ttl) end
return 1
