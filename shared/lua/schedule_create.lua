-- Create a schedule: its hash, its entry in its tenant's index and in its tenant's due set. The
-- same definition created again answers 'exists'; another definition under its id, 'conflict'; a
-- new one past the tenant's maxSchedules (its schedules here plus those the caller counted on the
-- other partitions), 'full'.
-- KEYS: schedule hash, tenant's due zset, tenants with schedules due, tenant index
-- ARGV: tenant, clientId, digest, cron, timezone, input, overlap, catchup, nextFire (ms), schedule key,
--       maxSchedules (0 = no limit), the tenant's schedules on the other partitions, endAt (ms, '' = none)
local h = KEYS[1]
if redis.call('EXISTS', h) == 1 then
  if redis.call('HGET', h, SCHED.DIGEST) == ARGV[3] and redis.call('HGET', h, SCHED.TENANT) == ARGV[1] then
    return 'exists'
  end
  return 'conflict'
end
local cap = tonumber(ARGV[11])
if cap > 0 and redis.call('ZCARD', KEYS[4]) + tonumber(ARGV[12]) >= cap then return 'full' end
local now = now_ms()
redis.call('HSET', h, SCHED.TENANT, ARGV[1], SCHED.CLIENT_ID, ARGV[2], SCHED.DIGEST, ARGV[3],
  SCHED.CRON, ARGV[4], SCHED.TIMEZONE, ARGV[5], SCHED.INPUT, ARGV[6], SCHED.OVERLAP, ARGV[7],
  SCHED.CATCHUP, ARGV[8], SCHED.CREATED_AT, now, SCHED.PAUSED, '', SCHED.NEXT_FIRE, ARGV[9],
  SCHED.LAST_FIRE, '', SCHED.LAST_RUN, '', SCHED.FIRED, 0, SCHED.SKIPPED, 0, SCHED.LAST_ERROR, '',
  SCHED.HELD, '', SCHED.END_AT, ARGV[13])
if ARGV[9] ~= '0' then  -- 0: it ends before its first firing
  redis.call('ZADD', KEYS[2], ARGV[9], ARGV[10])
  due_sync(KEYS[2], KEYS[3], ARGV[1])
end
redis.call('ZADD', KEYS[4], now, ARGV[10])
return 'created'
