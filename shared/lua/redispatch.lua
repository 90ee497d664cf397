-- The reconciler's per-run check of a run whose live-index deadline has passed, or (ARGV[4] = a
-- worker lease id) of a run in the runs set of a worker whose lease expired.
-- KEYS: run, stream, tools, current job key, current job in-progress key, next job key
-- ARGV: runId, expectedGen, currentJobId, dead worker lease id ('' = from the
--       live index)
-- A running run whose worker's lease expired counts a lost attempt (worker_lost): at
-- AGENTMILL_MAX_RUN_CRASHES it ends failed (poison_run) instead of being re-dispatched.
local h = redis.call('HMGET', KEYS[1], F.STATUS, F.GEN, F.OWNER, F.TENANT)
if ARGV[4] ~= '' and (h[3] ~= ARGV[4] or h[1] ~= S.RUNNING) then
  redis.call('SREM', worker_runs_key(ARGV[4]), ARGV[1])  -- no longer that worker's to carry
  return {'moved'}
end
if not h[1] then redis.call('ZREM', LIVE, ARGV[1]); return {'missing'} end
if is_terminal(h[1]) then
  local owed = redis.call('HGET', KEYS[1], F.HANDOFF)
  if owed and owed ~= '' then return {'ending_owed', owed} end  -- shared/children.py clears it when done
  redis.call('ZREM', LIVE, ARGV[1])
  return {'terminal'}
end
if tonumber(h[2]) ~= tonumber(ARGV[2]) then return {'moved'} end
local now = now_ms()
local reason = ''
if h[1] == S.RUNNING then
  if worker_alive(h[3]) then redis.call('ZREM', LIVE, ARGV[1]); return {'alive'} end
  local crashes, ended = worker_lost(KEYS[1], KEYS[2], KEYS[3], ARGV[1], h[3])
  if ended then return {'poison_run', tostring(crashes)} end
  reason = 'lease_expired'
elseif h[1] == S.QUEUED then
  if redis.call('EXISTS', KEYS[5]) == 0 and redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('ZADD', LIVE, now + tonumber(ctx().queued_check_ms), ARGV[1])
    -- held back by its tenant's running cap while none of the tenant's runs is running (the cap
    -- was raised or lifted since): nothing else would put the tenant's earliest held job back
    local t = h[4] or ''
    if redis.call('ZSCORE', tenant_held_key(t), ARGV[3]) and redis.call('ZCARD', tenant_running_key(t)) == 0 then
      unhold(t, 1)
      return {'unheld'}
    end
    return {'waiting'}
  end
  reason = 'job_lost'
elseif h[1] == S.SCHEDULED then
  local at = redis.call('ZSCORE', SCHEDULED, ARGV[3])
  if at then
    redis.call('ZADD', LIVE, tonumber(at) + tonumber(ctx().queued_check_ms), ARGV[1])
    return {'not_due'}
  end
  reason = 'job_lost'
elseif h[1] == S.AWAITING_HUMAN then
  local code, message, due = approval_expired(KEYS[1], now)
  if code then
    finalize(KEYS[1], KEYS[2], KEYS[3], ARGV[1], S.FAILED, code, message)
    return {code}
  end
  if due then  -- checked early (the sweeper's clock is not Redis's): keep the deadline watched
    redis.call('ZADD', LIVE, due, ARGV[1])
  else
    redis.call('ZREM', LIVE, ARGV[1])
  end
  return {'awaiting'}
elseif h[1] == S.AWAITING_TOOLS then
  local open, earliest = client_settle(KEYS[1], KEYS[3], now)
  if open > 0 then
    redis.call('ZADD', LIVE, earliest, ARGV[1])
    return {'awaiting_tools'}
  end
  reason = 'client_tools_settled'
elseif h[1] == S.AWAITING_MODEL then
  local m = redis.call('HMGET', KEYS[1], F.MODEL_AWAITED, F.MODEL_REPLY_INDEX, F.MODEL_SWITCH_AT)
  if m[1] and m[1] == m[2] then
    reason = 'model_replied'  -- a wake-up that did not happen
  elseif m[3] and m[3] ~= '' and now >= tonumber(m[3]) then
    redis.call('HSET', KEYS[1], F.MODEL_STANDARD, m[1])  -- its resume asks the standard lane
    reason = 'economy_deadline'
  else
    if m[3] and m[3] ~= '' then redis.call('ZADD', LIVE, tonumber(m[3]), ARGV[1]) else redis.call('ZREM', LIVE, ARGV[1]) end
    return {'awaiting_model'}
  end
elseif h[1] == S.AWAITING_CHILDREN then
  local deadline = tonumber(redis.call('HGET', KEYS[1], F.RUN_DEADLINE_MS) or '')
  if deadline and now >= deadline then
    finalize(KEYS[1], KEYS[2], KEYS[3], ARGV[1], S.FAILED, 'max_run_duration',
      'loopLimits.maxRunDurationMs reached while awaiting its child runs')
    return {'max_run_duration'}
  end
  if children_open(KEYS[1], KEYS[3]) > 0 then
    local due = now + tonumber(ctx().queued_check_ms)
    if deadline and deadline < due then due = deadline end
    redis.call('ZADD', LIVE, due, ARGV[1])
    return {'awaiting_children'}
  end
  reason = 'children_ended'  -- a wake-up that did not happen (it is never lost for long)
end
if redis.call('ZREM', QUEUE, ARGV[3]) == 1 or redis.call('ZREM', tenant_held_key(h[4] or ''), ARGV[3]) == 1 then
  depth_down(run_priority(ARGV[1]))
end
redis.call('DEL', KEYS[4])
local gen = tonumber(h[2]) + 1
redis.call('HSET', KEYS[1], F.GEN, gen, F.STATUS, S.QUEUED)
track(KEYS[1], ARGV[1], h[1], S.QUEUED)
enqueue_gen(ARGV[1], gen, now, KEYS[6])
return {'redispatched', reason}
