-- A batch delivered: its requests and its record go (every reply is already with its run).
-- Call: shared.calls.economy.EconDone. Returns the requests removed, -1 when the lease is not the
-- caller's.
if redis.call('GET', KEY.LEASE) ~= ARG.HOLDER then return -1 end
local raw = redis.call('HGET', KEY.BATCH, EB.IDS)
local n = 0
if raw then
  local ids = cjson.decode(raw)
  for i = 1, #ids, 1000 do
    n = n + redis.call('HDEL', KEY.REQUESTS, unpack(ids, i, math.min(i + 999, #ids)))
    redis.call('HDEL', KEY.WHERE, unpack(ids, i, math.min(i + 999, #ids)))
  end
end
redis.call('DEL', KEY.BATCH)
redis.call('ZREM', KEY.BATCHES, ARG.BATCH_ID)
return n
