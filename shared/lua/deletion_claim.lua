-- KEYS: the partition's deletions (keys.Partition.deletions)
-- ARGV: claim ms
-- Claim the deletion by metadata due first on this partition for one step: its score becomes the
-- claim's expiry, so a deleter that dies mid-step leaves it to the next. Reply: its key, or nothing.
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then return {} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), due[1])
return {due[1]}
