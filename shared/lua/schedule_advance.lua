-- A firer made (or skipped) a claimed schedule's due firings: record them and set its next firing,
-- if no other firer advanced it meanwhile (its nextFire is still the one the firer read). A paused
-- schedule stays out of the due set, and so does one past its end (its next firing 0); a deleted
-- one leaves it. A held schedule (its tenant not live: producer.schedules.firer) is looked at again
-- at `dueAt` rather than at its next firing.
-- KEYS: schedule hash, tenant's due zset, tenants with schedules due
-- ARGV: schedule key, nextFire read, new nextFire (0 = none: ended), runs made, firings skipped,
--       lastFire ('' = keep), lastRun ('' = keep), lastError ('' = keep, '-' = clear), tenant,
--       held (why its tenant's firings are held, '' = not held), dueAt ('' = its next firing)
local h = KEYS[1]
if redis.call('EXISTS', h) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  due_sync(KEYS[2], KEYS[3], ARGV[9])
  return 'gone'
end
if redis.call('HGET', h, SCHED.NEXT_FIRE) ~= ARGV[2] then return 'moved' end
redis.call('HSET', h, SCHED.NEXT_FIRE, ARGV[3], SCHED.HELD, ARGV[10])
redis.call('HINCRBY', h, SCHED.FIRED, tonumber(ARGV[4]))
redis.call('HINCRBY', h, SCHED.SKIPPED, tonumber(ARGV[5]))
if ARGV[6] ~= '' then redis.call('HSET', h, SCHED.LAST_FIRE, ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', h, SCHED.LAST_RUN, ARGV[7]) end
if ARGV[8] == '-' then redis.call('HSET', h, SCHED.LAST_ERROR, '')
elseif ARGV[8] ~= '' then redis.call('HSET', h, SCHED.LAST_ERROR, ARGV[8]) end
if redis.call('HGET', h, SCHED.PAUSED) == '1' or ARGV[3] == '0' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  local at = ARGV[11]
  if at == '' then at = ARGV[3] end
  redis.call('ZADD', KEYS[2], at, ARGV[1])
end
due_sync(KEYS[2], KEYS[3], ARGV[9])
return 'advanced'
