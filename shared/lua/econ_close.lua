-- Close a batch of a model's oldest open requests (at most n), under the batcher's lease.
-- Call: shared.calls.economy.EconClose. Returns the batch's size (0: nothing open), -1 when the
-- lease is not the caller's.
if redis.call('GET', KEY.LEASE) ~= ARG.HOLDER then return -1 end
local ids = redis.call('ZRANGE', KEY.OPEN, 0, tonumber(ARG.N) - 1)
if #ids == 0 then return 0 end
redis.call('ZREM', KEY.OPEN, unpack(ids))
local now = now_ms()
redis.call('HSET', KEY.BATCH, EB.STATE, ES.CLOSED, EB.MODEL, ARG.MODEL, EB.IDS, cjson.encode(ids), EB.CLOSED_AT, now,
  EB.POLLS, 0)
redis.call('ZADD', KEY.BATCHES, now, ARG.BATCH_ID)
for i = 1, #ids do redis.call('HSET', KEY.WHERE, ids[i], ARG.BATCH_ID) end
return #ids
