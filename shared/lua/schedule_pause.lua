-- Pause a tenant's schedule (out of the due set: no firing until resumed) or resume it (its next
-- firing: the first after now, which the caller computed; 0: none before its end). Either again
-- changes nothing.
-- KEYS: schedule hash, tenant's due zset, tenants with schedules due
-- ARGV: schedule key, tenant, '1' pause | '' resume, nextFire (resume)
local h = KEYS[1]
if redis.call('HGET', h, SCHED.TENANT) ~= ARGV[2] then return 'unknown' end
if (redis.call('HGET', h, SCHED.PAUSED) or '') == ARGV[3] then return 'unchanged' end
if ARGV[3] == '1' then
  redis.call('HSET', h, SCHED.PAUSED, '1')
  redis.call('ZREM', KEYS[2], ARGV[1])
  due_sync(KEYS[2], KEYS[3], ARGV[2])
  return 'paused'
end
redis.call('HSET', h, SCHED.PAUSED, '', SCHED.NEXT_FIRE, ARGV[4])
if ARGV[4] ~= '0' then redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1]) end
due_sync(KEYS[2], KEYS[3], ARGV[2])
return 'resumed'
