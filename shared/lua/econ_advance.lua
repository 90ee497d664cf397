-- A batch's next state and what it learnt (field, value pairs), under the batcher's lease.
-- Call: shared.calls.economy.EconAdvance. Returns 1, 0 when the batch is gone (delivered), -1 when
-- the lease is not the caller's.
if redis.call('GET', KEY.LEASE) ~= ARG.HOLDER then return -1 end
if redis.call('EXISTS', KEY.BATCH) == 0 then return 0 end
local args = {}
for k = 1, 2 * tonumber(ARG.COUNT) do args[k] = ARGV[ARGN.TERMS - 1 + k] end
redis.call('HSET', KEY.BATCH, unpack(args))
return 1
