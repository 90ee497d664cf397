-- Create a schedule: its hash, its entry in its tenant's index and in its tenant's due set. The
-- same definition created again answers 'exists'; another definition under its id, 'conflict'; a
-- new one past the tenant's maxSchedules (its schedules here plus those the caller counted on the
-- other partitions), 'full'.
-- The call: shared.calls.schedules.ScheduleCreate.
local h = KEY.SCHEDULE
if redis.call('EXISTS', h) == 1 then
  if redis.call('HGET', h, SCHED.DIGEST) == ARG.DIGEST and redis.call('HGET', h, SCHED.TENANT) == ARG.TENANT then
    return V.EXISTS
  end
  return V.CONFLICT
end
local cap = tonumber(ARG.MAX_SCHEDULES)
if cap > 0 and redis.call('ZCARD', KEY.INDEX) + tonumber(ARG.ELSEWHERE) >= cap then return V.FULL end
local now = now_ms()
redis.call('HSET', h, SCHED.TENANT, ARG.TENANT, SCHED.CLIENT_ID, ARG.CLIENT_ID, SCHED.DIGEST, ARG.DIGEST,
  SCHED.CRON, ARG.CRON, SCHED.TIMEZONE, ARG.TIMEZONE, SCHED.INPUT, ARG.INPUT, SCHED.OVERLAP, ARG.OVERLAP,
  SCHED.CATCHUP, ARG.CATCHUP, SCHED.CREATED_AT, now, SCHED.PAUSED, '', SCHED.NEXT_FIRE, ARG.NEXT_FIRE,
  SCHED.LAST_FIRE, '', SCHED.LAST_RUN, '', SCHED.FIRED, 0, SCHED.SKIPPED, 0, SCHED.LAST_ERROR, '',
  SCHED.HELD, '', SCHED.END_AT, ARG.END_AT)
if ARG.NEXT_FIRE ~= '0' then  -- 0: it ends before its first firing
  redis.call('ZADD', KEY.DUE, ARG.NEXT_FIRE, ARG.SCHEDULE_KEY)
  due_sync(KEY.DUE, KEY.DUE_TENANTS, ARG.TENANT)
end
redis.call('ZADD', KEY.INDEX, now, ARG.SCHEDULE_KEY)
return V.CREATED
