-- One worker heartbeat on one partition, O(1) whatever the worker's number of runs: renew its lease
-- (its lease key, which a commit checks, and its entry in the workers zset, which the sweep reads)
-- and take up to max_messages abort nudges from its inbox, each answered with the run's epoch and
-- abort reason (the run hash stays the truth; epoch -1: the run is gone), after the number of live
-- workers (its claims' share). A lease that already expired is not renewed: the worker must give up
-- its runs (``lost``); register = '1' registers a new lease id.
-- Call: shared.calls.steps.Beat.
if ARG.REGISTER == '1' then
  redis.call('SET', KEY.LEASE, '1', 'PX', ARG.LEASE_MS)
elseif not redis.call('SET', KEY.LEASE, '1', 'PX', ARG.LEASE_MS, 'XX') then  -- renewed only if it still exists
  return {V.LOST}
end
local now = now_ms()
redis.call('ZADD', WORKERS, now + tonumber(ARG.LEASE_MS), ARG.LEASE_ID)
-- the same expiry: its runs leave out the event an answer wrote (prelude.lua answer_event); and the
-- entries whose lease expired go (never counted again, and a worker forgotten by the reconciler of
-- a release before answer_workers, forget_worker.lua, would leave its entry forever): O(log N) when
-- there is none, each entry removed once.
redis.call('ZADD', KEY.ANSWER_WORKERS, now + tonumber(ARG.LEASE_MS), ARG.LEASE_ID)
redis.call('ZREMRANGEBYSCORE', KEY.ANSWER_WORKERS, '-inf', '(' .. now)
local out = {V.OK, redis.call('ZCOUNT', WORKERS, now, '+inf')}
local msgs = redis.call('LPOP', KEY.INBOX, tonumber(ARG.MAX_MESSAGES))
if msgs then
  for _, rid in ipairs(msgs) do
    local r = redis.call('HMGET', run_key(rid), F.EPOCH, F.ABORT, F.OWNER)
    if not r[1] then  -- gone (deleted after its abort was asked): epoch -1, its worker drops it now
      out[#out + 1] = rid; out[#out + 1] = '-1'; out[#out + 1] = ''
    elseif r[3] == ARG.LEASE_ID then
      out[#out + 1] = rid; out[#out + 1] = r[1] or '0'; out[#out + 1] = r[2] or ''
    end
  end
end
return out
