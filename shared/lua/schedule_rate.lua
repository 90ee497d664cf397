-- A tenant's schedule firings per minute (scheduleFiringsPerMinute): a count per UTC minute of
-- Redis time, at the tenant's home partition. A firer asks for the firings it is about to make and
-- is granted as many as the minute has left; the others are skipped (producer.schedules.firer).
-- The call: shared.calls.schedules.ScheduleRate.
-- Returns: the firings granted
local want, cap = tonumber(ARG.WANT), tonumber(ARG.CAP)
local minute = math.floor(now_ms() / 60000)
local b = redis.call('HMGET', KEY.COUNT, 'minute', 'n')
local n = 0
if tonumber(b[1]) == minute then n = tonumber(b[2]) or 0 end
local granted = math.max(0, math.min(want, cap - n))
redis.call('HSET', KEY.COUNT, 'minute', minute, 'n', n + granted)
redis.call('PEXPIRE', KEY.COUNT, 120000)
return granted
