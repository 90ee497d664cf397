-- A provider batch's answer to a run's model call (the economy lane), kept with the run once: a
-- repeat (a batcher taking over delivers again) changes nothing, nor does an answer to a call the
-- run is past or sent to the standard lane (a late answer: discarded). When the run is parked
-- waiting for this call, it goes back on the queue; its worker reads the answer from here.
-- KEYS: run   ARGV: runId, the call's index, the answer (JSON)
-- Returns {'resumed'}, {'recorded'}, {'duplicate'}, {'late'}, {'finished'} or {'unknown_run'}.
local h = redis.call('HMGET', KEYS[1], F.STATUS, F.MODEL_REPLY_INDEX, F.MODEL_AWAITED, F.MODEL_STANDARD)
if not h[1] then return {'unknown_run'} end
if is_terminal(h[1]) then return {'finished'} end
local index = tonumber(ARGV[2])
if h[2] and tonumber(h[2]) >= index then return {'duplicate'} end
if (h[4] and h[4] ~= '' and tonumber(h[4]) >= index) or (h[3] and tonumber(h[3]) > index) then return {'late'} end
local now = now_ms()
redis.call('HSET', KEYS[1], F.MODEL_REPLY_INDEX, ARGV[2], F.MODEL_REPLY, ARGV[3])
if h[1] == S.AWAITING_MODEL and h[3] == ARGV[2] then
  client_resume(KEYS[1], ARGV[1], now)
  return {'resumed'}
end
return {'recorded'}
