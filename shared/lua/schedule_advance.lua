-- A firer made (or skipped) a claimed schedule's due firings: record them and set its next firing,
-- if no other firer advanced it meanwhile (its nextFire is still the one the firer read). A paused
-- schedule stays out of the due set, and so does one past its end (its next firing 0); a deleted
-- one leaves it. A held schedule (its tenant not live: producer.schedules.firer) is looked at again
-- at `dueAt` rather than at its next firing.
-- The call: shared.calls.schedules.ScheduleAdvance.
local h = KEY.SCHEDULE
if redis.call('EXISTS', h) == 0 then
  redis.call('ZREM', KEY.DUE, ARG.SCHEDULE_KEY)
  due_sync(KEY.DUE, KEY.DUE_TENANTS, ARG.TENANT)
  return V.GONE
end
if redis.call('HGET', h, SCHED.NEXT_FIRE) ~= ARG.READ then return V.MOVED end
redis.call('HSET', h, SCHED.NEXT_FIRE, ARG.NEXT_FIRE, SCHED.HELD, ARG.HELD)
redis.call('HINCRBY', h, SCHED.FIRED, tonumber(ARG.MADE))
redis.call('HINCRBY', h, SCHED.SKIPPED, tonumber(ARG.SKIPPED))
if ARG.LAST_FIRE ~= '' then redis.call('HSET', h, SCHED.LAST_FIRE, ARG.LAST_FIRE) end
if ARG.LAST_RUN ~= '' then redis.call('HSET', h, SCHED.LAST_RUN, ARG.LAST_RUN) end
if ARG.LAST_ERROR == '-' then redis.call('HSET', h, SCHED.LAST_ERROR, '')
elseif ARG.LAST_ERROR ~= '' then redis.call('HSET', h, SCHED.LAST_ERROR, ARG.LAST_ERROR) end
if redis.call('HGET', h, SCHED.PAUSED) == '1' or ARG.NEXT_FIRE == '0' then
  redis.call('ZREM', KEY.DUE, ARG.SCHEDULE_KEY)
else
  local at = ARG.DUE_AT
  if at == '' then at = ARG.NEXT_FIRE end
  redis.call('ZADD', KEY.DUE, at, ARG.SCHEDULE_KEY)
end
due_sync(KEY.DUE, KEY.DUE_TENANTS, ARG.TENANT)
return V.ADVANCED
