-- Pause a tenant's schedule (out of the due set: no firing until resumed) or resume it (its next
-- firing: the first after now, which the caller computed; 0: none before its end). Either again
-- changes nothing. The call: shared.calls.schedules.SchedulePause.
local h = KEY.SCHEDULE
if redis.call('HGET', h, SCHED.TENANT) ~= ARG.TENANT then return V.UNKNOWN end
if (redis.call('HGET', h, SCHED.PAUSED) or '') == ARG.PAUSE then return V.UNCHANGED end
if ARG.PAUSE == '1' then
  redis.call('HSET', h, SCHED.PAUSED, '1')
  redis.call('ZREM', KEY.DUE, ARG.SCHEDULE_KEY)
  due_sync(KEY.DUE, KEY.DUE_TENANTS, ARG.TENANT)
  return V.PAUSED
end
redis.call('HSET', h, SCHED.PAUSED, '', SCHED.NEXT_FIRE, ARG.NEXT_FIRE)
if ARG.NEXT_FIRE ~= '0' then redis.call('ZADD', KEY.DUE, ARG.NEXT_FIRE, ARG.SCHEDULE_KEY) end
due_sync(KEY.DUE, KEY.DUE_TENANTS, ARG.TENANT)
return V.RESUMED
