-- Delete a tenant's schedule (the runs it made stay). The call: shared.calls.schedules.ScheduleDelete.
if redis.call('HGET', KEY.SCHEDULE, SCHED.TENANT) ~= ARG.TENANT then return V.UNKNOWN end
redis.call('DEL', KEY.SCHEDULE)
redis.call('ZREM', KEY.DUE, ARG.SCHEDULE_KEY)
due_sync(KEY.DUE, KEY.DUE_TENANTS, ARG.TENANT)
redis.call('ZREM', KEY.INDEX, ARG.SCHEDULE_KEY)
return V.DELETED
