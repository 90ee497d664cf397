-- A worker gives up its lease on a partition (graceful stop, or it found its lease lapsed), or the
-- reconciler forgets a dead one: the lease ends now; the entry, runs set and inbox go once the set
-- is empty (until then the entry stays, expired, so sweeps keep finding the runs).
-- KEYS: runs set, inbox, lease key   ARGV: lease id, only if expired ('1' = the reconciler's check)
local exp = redis.call('ZSCORE', WORKERS, ARGV[1])
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[3]) == 1 then return {'alive'} end
redis.call('DEL', KEYS[3])
if redis.call('SCARD', KEYS[1]) > 0 then
  if exp then redis.call('ZADD', WORKERS, 0, ARGV[1]) end
  return {'has_runs'}
end
redis.call('DEL', KEYS[1], KEYS[2])
if not exp then return {'gone'} end
redis.call('ZREM', WORKERS, ARGV[1])
return {'forgotten'}
