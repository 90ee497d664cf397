-- Take or renew an endpoint's batcher lease: one holder pool-wide; a dead holder's lease expires.
-- Call: shared.calls.economy.EconLease. Returns 1 held by the caller, 0 held by another.
local cur = redis.call('GET', KEY.LEASE)
if cur and cur ~= ARG.HOLDER then return 0 end
redis.call('SET', KEY.LEASE, ARG.HOLDER, 'PX', tonumber(ARG.TTL_MS))
return 1
