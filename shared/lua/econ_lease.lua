-- Take or renew an endpoint's batcher lease: one holder pool-wide; a dead holder's lease expires.
-- KEYS lease   ARGV holder, ttlMs   Returns 1 held by the caller, 0 held by another.
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1
