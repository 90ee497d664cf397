-- The hand-back: the run goes straight back on the queue. Graceful, the worker stopped at a
-- checkpoint. With LOST_OWNER, the run stopped without writing on its worker's passed lease
-- deadline: it goes back only while it still runs under that lease id (no reconciler has moved it,
-- no worker taken it since), and counts a lost attempt as the reconciler counts a lapsed lease's
-- runs (at AGENTMILL_MAX_RUN_CRASHES it ends failed, poison_run).
-- The call: shared.calls.runs.Release.
local TAIL = 3
local h = redis.call('HMGET', KEY.RUN, F.EPOCH, F.STATUS, F.OWNER)
if not h[1] or tonumber(h[1]) ~= tonumber(ARG.EPOCH) then return {V.FENCED} end
if is_terminal(h[2]) then return {V.TERMINAL} end
if ARG.LOST_OWNER ~= '' then
  if h[2] ~= S.RUNNING or h[3] ~= ARG.LOST_OWNER then return {V.FENCED} end
  local crashes, ended = worker_lost(KEY.RUN, KEY.STREAM, KEY.TOOLS, ARG.RUN_ID, h[3])
  if ended then return {V.POISON_RUN, tostring(crashes)} end
else
  leave_worker(KEY.RUN, ARG.RUN_ID)
end
redis.call('HSET', KEY.RUN, F.OWNER, '', F.GEN, ARG.NEW_GEN, F.STATUS, S.QUEUED)
track(KEY.RUN, ARG.RUN_ID, h[2], S.QUEUED)
enqueue_gen(ARG.RUN_ID, tonumber(ARG.NEW_GEN), now_ms())
return {V.RELEASED}
