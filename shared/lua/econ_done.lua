-- A batch delivered: its requests and its record go (every reply is already with its run).
-- KEYS requests, batches, batch, lease, where   ARGV holder, batchId
-- Returns the requests removed, -1 when the lease is not the caller's.
if redis.call('GET', KEYS[4]) ~= ARGV[1] then return -1 end
local raw = redis.call('HGET', KEYS[3], EB.IDS)
local n = 0
if raw then
  local ids = cjson.decode(raw)
  for i = 1, #ids, 1000 do
    n = n + redis.call('HDEL', KEYS[1], unpack(ids, i, math.min(i + 999, #ids)))
    redis.call('HDEL', KEYS[5], unpack(ids, i, math.min(i + 999, #ids)))
  end
end
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[2])
return n
