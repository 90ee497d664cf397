-- A batch's next state and what it learnt (field, value pairs), under the batcher's lease.
-- KEYS batch, lease   ARGV holder, n, then field, value × n
-- Returns 1, 0 when the batch is gone (delivered), -1 when the lease is not the caller's.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local args = {}
for k = 1, 2 * tonumber(ARGV[2]) do args[k] = ARGV[2 + k] end
redis.call('HSET', KEYS[1], unpack(args))
return 1
