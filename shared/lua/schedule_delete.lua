-- Delete a tenant's schedule (the runs it made stay).
-- KEYS: schedule hash, tenant's due zset, tenants with schedules due, tenant index
-- ARGV: schedule key, tenant
if redis.call('HGET', KEYS[1], SCHED.TENANT) ~= ARGV[2] then return 'unknown' end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
due_sync(KEYS[2], KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[1])
return 'deleted'
