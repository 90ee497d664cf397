-- The call: shared.calls.claims.DeletionClaim.
-- Claim the deletion by metadata due first on this partition for one step: its score becomes the
-- claim's expiry, so a deleter that dies mid-step leaves it to the next. Reply: its key, or nothing.
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEY.DELETIONS, '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then return {} end
redis.call('ZADD', KEY.DELETIONS, now + tonumber(ARG.CLAIM_MS), due[1])
return {due[1]}
