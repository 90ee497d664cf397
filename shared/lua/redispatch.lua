-- The reconciler's per-run check of a run whose live-index deadline has passed, or (ARGV[10] = a
-- worker lease id) of a run in the runs set of a worker whose lease expired.
-- KEYS: run, live, queue, current job key, current job in-progress key, new job key, stream, tools
-- ARGV: runId, expectedGen, currentJobId, newJobId, job, jobExpireMs, queuedCheckMs, maxlen, retention,
--       dead worker lease id ('' = from the live index)
local h = redis.call('HMGET', KEYS[1], 'status', 'gen', 'owner')
if ARGV[10] ~= '' and (h[3] ~= ARGV[10] or h[1] ~= 'running') then
  redis.call('SREM', worker_runs_key(ARGV[10]), ARGV[1])  -- no longer that worker's to carry
  return {'moved'}
end
if not h[1] then redis.call('ZREM', KEYS[2], ARGV[1]); return {'missing'} end
if is_terminal(h[1]) then redis.call('ZREM', KEYS[2], ARGV[1]); return {'terminal'} end
if tonumber(h[2]) ~= tonumber(ARGV[2]) then return {'moved'} end
local now = now_ms()
local reason = ''
if h[1] == 'running' then
  if worker_alive(h[3], now) then redis.call('ZREM', KEYS[2], ARGV[1]); return {'alive'} end
  redis.call('SREM', worker_runs_key(h[3]), ARGV[1])
  reason = 'lease_expired'
elseif h[1] == 'queued' then
  if redis.call('EXISTS', KEYS[5]) == 0 and redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[1])
    return {'waiting'}
  end
  reason = 'job_lost'
elseif h[1] == 'awaiting_human' then
  local code, message, due = approval_expired(KEYS[1], now)
  if code then
    finalize(KEYS[1], KEYS[7], KEYS[8], KEYS[2], ARGV[1], 'failed', code, message, ARGV[8], ARGV[9])
    return {code}
  end
  if due then  -- checked early (the sweeper's clock is not Redis's): keep the deadline watched
    redis.call('ZADD', KEYS[2], due, ARGV[1])
  else
    redis.call('ZREM', KEYS[2], ARGV[1])
  end
  return {'awaiting'}
elseif h[1] == 'awaiting_tools' then
  local open, earliest = client_settle(KEYS[1], KEYS[8], now)
  if open > 0 then
    redis.call('ZADD', KEYS[2], earliest, ARGV[1])
    return {'awaiting_tools'}
  end
  reason = 'client_tools_settled'
end
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[1], 'gen', tonumber(h[2]) + 1, 'status', 'queued')
track(KEYS[1], ARGV[1], h[1], 'queued')
redis.call('SET', KEYS[6], ARGV[5], 'PX', ARGV[6])
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[1])
return {'redispatched', reason}
