-- Close a batch of a model's oldest open requests (at most ARGV n), under the batcher's lease.
-- KEYS open (the model's), batches, batch, lease, where   ARGV holder, batchId, n, model
-- Returns the batch's size (0: nothing open), -1 when the lease is not the caller's.
if redis.call('GET', KEYS[4]) ~= ARGV[1] then return -1 end
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
if #ids == 0 then return 0 end
redis.call('ZREM', KEYS[1], unpack(ids))
local now = now_ms()
redis.call('HSET', KEYS[3], EB.STATE, ES.CLOSED, EB.MODEL, ARGV[4], EB.IDS, cjson.encode(ids), EB.CLOSED_AT, now,
  EB.POLLS, 0)
redis.call('ZADD', KEYS[2], now, ARGV[2])
for i = 1, #ids do redis.call('HSET', KEYS[5], ids[i], ARGV[2]) end
return #ids
