-- A firer made (or skipped) a claimed schedule's due firings: record them and set its next firing,
-- if no other firer advanced it meanwhile (its nextFire is still the one the firer read). A paused
-- schedule stays out of the due set; a deleted one leaves it.
-- KEYS: schedule hash, due zset
-- ARGV: schedule key, nextFire read, new nextFire, runs made, firings skipped, lastFire ('' = keep),
--       lastRun ('' = keep), lastError ('' = keep, '-' = clear)
local h = KEYS[1]
if redis.call('EXISTS', h) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 'gone'
end
if redis.call('HGET', h, SCHED.NEXT_FIRE) ~= ARGV[2] then return 'moved' end
redis.call('HSET', h, SCHED.NEXT_FIRE, ARGV[3])
redis.call('HINCRBY', h, SCHED.FIRED, tonumber(ARGV[4]))
redis.call('HINCRBY', h, SCHED.SKIPPED, tonumber(ARGV[5]))
if ARGV[6] ~= '' then redis.call('HSET', h, SCHED.LAST_FIRE, ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', h, SCHED.LAST_RUN, ARGV[7]) end
if ARGV[8] == '-' then redis.call('HSET', h, SCHED.LAST_ERROR, '')
elseif ARGV[8] ~= '' then redis.call('HSET', h, SCHED.LAST_ERROR, ARGV[8]) end
if redis.call('HGET', h, SCHED.PAUSED) == '1' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return 'advanced'
