-- A worker gives up its lease (graceful stop, or it found its lease lapsed), or the reconciler
-- forgets a dead one: the lease ends now; the entry, runs set and inbox go once the set is empty
-- (until then the entry stays, expired, so sweeps keep finding the runs).
-- KEYS: workers, runs set, inbox   ARGV: lease id, only if expired ('1' = the reconciler's check)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ARGV[2] == '1' and exp and tonumber(exp) > now_ms() then return {'alive'} end
if redis.call('SCARD', KEYS[2]) > 0 then
  if exp then redis.call('ZADD', KEYS[1], 0, ARGV[1]) end
  return {'has_runs'}
end
redis.call('DEL', KEYS[2], KEYS[3])
if not exp then return {'gone'} end
redis.call('ZREM', KEYS[1], ARGV[1])
return {'forgotten'}
