-- Create a schedule: its hash, its entry in its tenant's index and in the partition's due set.
-- The same definition created again answers 'exists'; another definition under its id, 'conflict'.
-- KEYS: schedule hash, due zset, tenant index
-- ARGV: tenant, clientId, digest, cron, timezone, input, overlap, catchup, nextFire (ms), schedule key
local h = KEYS[1]
if redis.call('EXISTS', h) == 1 then
  if redis.call('HGET', h, SCHED.DIGEST) == ARGV[3] and redis.call('HGET', h, SCHED.TENANT) == ARGV[1] then
    return 'exists'
  end
  return 'conflict'
end
local now = now_ms()
redis.call('HSET', h, SCHED.TENANT, ARGV[1], SCHED.CLIENT_ID, ARGV[2], SCHED.DIGEST, ARGV[3],
  SCHED.CRON, ARGV[4], SCHED.TIMEZONE, ARGV[5], SCHED.INPUT, ARGV[6], SCHED.OVERLAP, ARGV[7],
  SCHED.CATCHUP, ARGV[8], SCHED.CREATED_AT, now, SCHED.PAUSED, '', SCHED.NEXT_FIRE, ARGV[9],
  SCHED.LAST_FIRE, '', SCHED.LAST_RUN, '', SCHED.FIRED, 0, SCHED.SKIPPED, 0, SCHED.LAST_ERROR, '')

redis.call('ZADD', KEYS[2], ARGV[9], ARGV[10])
redis.call('ZADD', KEYS[3], now, ARGV[10])
return 'created'
