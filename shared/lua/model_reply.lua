-- A provider batch's answer to a run's model call (the economy lane), kept with the run once: a
-- repeat (a batcher taking over delivers again) changes nothing, nor does an answer to a call the
-- run is past or sent to the standard lane (a late answer: discarded). When the run is parked
-- waiting for this call, it goes back on the queue; its worker reads the answer from here.
-- Call: shared.calls.steps.ModelReply; its verdict alone.
local h = redis.call('HMGET', KEY.RUN, F.STATUS, F.MODEL_REPLY_INDEX, F.MODEL_AWAITED, F.MODEL_STANDARD)
if not h[1] then return {V.UNKNOWN_RUN} end
if is_terminal(h[1]) then return {V.FINISHED} end
local index = tonumber(ARG.INDEX)
if h[2] and tonumber(h[2]) >= index then return {V.DUPLICATE} end
if (h[4] and h[4] ~= '' and tonumber(h[4]) >= index) or (h[3] and tonumber(h[3]) > index) then return {V.LATE} end
local now = now_ms()
redis.call('HSET', KEY.RUN, F.MODEL_REPLY_INDEX, ARG.INDEX, F.MODEL_REPLY, ARG.ANSWER)
if h[1] == S.AWAITING_MODEL and h[3] == ARG.INDEX then
  client_resume(KEY.RUN, ARG.RUN_ID, now)
  return {V.RESUMED}
end
return {V.RECORDED}
