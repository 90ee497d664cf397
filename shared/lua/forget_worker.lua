-- A worker gives up its lease on a partition (graceful stop, or it found its lease lapsed), or the
-- reconciler forgets a dead one: the lease ends now; the entry, runs set and inbox go once the set
-- is empty (until then the entry stays, expired, so sweeps keep finding the runs).
-- The call: shared.calls.workers.ForgetWorker.
local exp = redis.call('ZSCORE', WORKERS, ARG.LEASE_ID)
if ARG.ONLY_IF_EXPIRED == '1' and redis.call('EXISTS', KEY.LEASE) == 1 then return {V.ALIVE} end
redis.call('DEL', KEY.LEASE)
redis.call('ZREM', KEY.ANSWER_WORKERS, ARG.LEASE_ID)  -- not live: as WORKERS's entry (prelude.lua answer_event)
if redis.call('SCARD', KEY.RUNS) > 0 then
  if exp then redis.call('ZADD', WORKERS, 0, ARG.LEASE_ID) end
  return {V.HAS_RUNS}
end
redis.call('DEL', KEY.RUNS, KEY.INBOX)
if not exp then return {V.GONE} end
redis.call('ZREM', WORKERS, ARG.LEASE_ID)
return {V.FORGOTTEN}
