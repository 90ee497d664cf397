-- The reconciler's per-run check of a run whose live-index deadline has passed, or (a dead worker's
-- lease id given) of a run in the runs set of a worker whose lease expired.
-- The call: shared.calls.dispatch.Redispatch.
-- A running run whose worker's lease expired counts a lost attempt (worker_lost): at
-- AGENTMILL_MAX_RUN_CRASHES it ends failed (poison_run) instead of being re-dispatched.
local h = redis.call('HMGET', KEY.RUN, F.STATUS, F.GEN, F.OWNER, F.TENANT)
if ARG.DEAD_WORKER ~= '' and (h[3] ~= ARG.DEAD_WORKER or h[1] ~= S.RUNNING) then
  redis.call('SREM', worker_runs_key(ARG.DEAD_WORKER), ARG.RUN_ID)  -- no longer that worker's to carry
  return {V.MOVED}
end
if not h[1] then redis.call('ZREM', LIVE, ARG.RUN_ID); return {V.MISSING} end
if is_terminal(h[1]) then
  local owed = redis.call('HGET', KEY.RUN, F.HANDOFF)
  if owed and owed ~= '' then return {V.ENDING_OWED, owed} end  -- shared/children.py clears it when done
  redis.call('ZREM', LIVE, ARG.RUN_ID)
  return {V.TERMINAL}
end
if tonumber(h[2]) ~= tonumber(ARG.GEN) then return {V.MOVED} end
local now = now_ms()
local reason = ''
if h[1] == S.RUNNING then
  if worker_alive(h[3]) then redis.call('ZREM', LIVE, ARG.RUN_ID); return {V.ALIVE} end
  local crashes, ended = worker_lost(KEY.RUN, KEY.STREAM, KEY.TOOLS, ARG.RUN_ID, h[3])
  if ended then return {V.POISON_RUN, tostring(crashes)} end
  reason = REASON.LEASE_EXPIRED
elseif h[1] == S.QUEUED then
  if redis.call('EXISTS', KEY.IN_PROGRESS) == 0 and redis.call('EXISTS', KEY.JOB) == 1 then
    redis.call('ZADD', LIVE, now + tonumber(ctx().queued_check_ms), ARG.RUN_ID)
    -- held back by its tenant's running cap while none of the tenant's runs is running (the cap
    -- was raised or lifted since): nothing else would put the tenant's earliest held job back
    local t = h[4] or ''
    if redis.call('ZSCORE', tenant_held_key(t), ARG.JOB_ID) and redis.call('ZCARD', tenant_running_key(t)) == 0 then
      unhold(t, 1)
      return {V.UNHELD}
    end
    return {V.WAITING}
  end
  reason = REASON.JOB_LOST
elseif h[1] == S.SCHEDULED then
  local at = redis.call('ZSCORE', SCHEDULED, ARG.JOB_ID)
  if at then
    redis.call('ZADD', LIVE, tonumber(at) + tonumber(ctx().queued_check_ms), ARG.RUN_ID)
    return {V.NOT_DUE}
  end
  reason = REASON.JOB_LOST
elseif h[1] == S.AWAITING_HUMAN then
  local code, message, due = approval_expired(KEY.RUN, now)
  if code then
    finalize(KEY.RUN, KEY.STREAM, KEY.TOOLS, ARG.RUN_ID, S.FAILED, code, message)
    return {code}
  end
  if due then  -- checked early (the sweeper's clock is not Redis's): keep the deadline watched
    redis.call('ZADD', LIVE, due, ARG.RUN_ID)
  else
    redis.call('ZREM', LIVE, ARG.RUN_ID)
  end
  return {V.AWAITING}
elseif h[1] == S.AWAITING_TOOLS then
  local open, earliest = client_settle(KEY.RUN, KEY.TOOLS, now)
  if open > 0 then
    redis.call('ZADD', LIVE, earliest, ARG.RUN_ID)
    return {V.AWAITING_TOOLS}
  end
  reason = REASON.CLIENT_TOOLS_SETTLED
elseif h[1] == S.AWAITING_MODEL then
  local m = redis.call('HMGET', KEY.RUN, F.MODEL_AWAITED, F.MODEL_REPLY_INDEX, F.MODEL_SWITCH_AT)
  if m[1] and m[1] == m[2] then
    reason = REASON.MODEL_REPLIED  -- a wake-up that did not happen
  elseif m[3] and m[3] ~= '' and now >= tonumber(m[3]) then
    redis.call('HSET', KEY.RUN, F.MODEL_STANDARD, m[1])  -- its resume asks the standard lane
    reason = REASON.ECONOMY_DEADLINE
  else
    if m[3] and m[3] ~= '' then redis.call('ZADD', LIVE, tonumber(m[3]), ARG.RUN_ID) else redis.call('ZREM', LIVE, ARG.RUN_ID) end
    return {V.AWAITING_MODEL}
  end
elseif h[1] == S.AWAITING_CHILDREN then
  local deadline = tonumber(redis.call('HGET', KEY.RUN, F.RUN_DEADLINE_MS) or '')
  if deadline and now >= deadline then
    finalize(KEY.RUN, KEY.STREAM, KEY.TOOLS, ARG.RUN_ID, S.FAILED, 'max_run_duration',
      'loopLimits.maxRunDurationMs reached while awaiting its child runs')
    return {V.MAX_RUN_DURATION}
  end
  if children_open(KEY.RUN, KEY.TOOLS) > 0 then
    local due = now + tonumber(ctx().queued_check_ms)
    if deadline and deadline < due then due = deadline end
    redis.call('ZADD', LIVE, due, ARG.RUN_ID)
    return {V.AWAITING_CHILDREN}
  end
  reason = REASON.CHILDREN_ENDED  -- a wake-up that did not happen (it is never lost for long)
end
if redis.call('ZREM', QUEUE, ARG.JOB_ID) == 1 or redis.call('ZREM', tenant_held_key(h[4] or ''), ARG.JOB_ID) == 1 then
  depth_down(run_priority(ARG.RUN_ID))
end
redis.call('DEL', KEY.JOB)
local gen = tonumber(h[2]) + 1
redis.call('HSET', KEY.RUN, F.GEN, gen, F.STATUS, S.QUEUED)
track(KEY.RUN, ARG.RUN_ID, h[1], S.QUEUED)
enqueue_gen(ARG.RUN_ID, gen, now, KEY.NEXT_JOB)
return {V.REDISPATCHED, reason}
