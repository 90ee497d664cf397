-- Graceful hand-back: the worker stops at a checkpoint and the run goes straight back on the queue.
-- The call: shared.calls.runs.Release (KEYS run; ARG.EPOCH, ARG.RUN_ID, ARG.NEW_GEN).
local h = redis.call('HMGET', KEY.RUN, F.EPOCH, F.STATUS)
if not h[1] or tonumber(h[1]) ~= tonumber(ARG.EPOCH) then return {V.FENCED} end
if is_terminal(h[2]) then return {V.TERMINAL} end
leave_worker(KEY.RUN, ARG.RUN_ID)
redis.call('HSET', KEY.RUN, F.OWNER, '', F.GEN, ARG.NEW_GEN, F.STATUS, S.QUEUED)
track(KEY.RUN, ARG.RUN_ID, h[2], S.QUEUED)
enqueue_gen(ARG.RUN_ID, tonumber(ARG.NEW_GEN), now_ms())
return {V.RELEASED}
