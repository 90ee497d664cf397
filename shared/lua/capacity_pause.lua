-- No call to the endpoint starts for ms (an existing longer pause stays).
-- The call: shared.calls.limits.CapacityPause. Returns: the pause's ms from now.
local now = now_ms()
local ms = tonumber(ARG.MS)
local current = tonumber(redis.call('GET', KEY.PAUSE) or '0')
if current >= now + ms then return current - now end
redis.call('SET', KEY.PAUSE, now + ms, 'PX', ms)
return ms
