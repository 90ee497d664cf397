-- The call: shared.calls.runs.Abort (KEYS run, stream, tools; ARG.RUN_ID, ARG.REASON, ARG.TENANT,
-- ARG.ACTOR: who aborts, named in the run's status event or its abort request; '' = none).
-- A queued or scheduled run's job leaves the queue (or the scheduled jobs, or its tenant's held
-- jobs) with it: an aborted run takes no slot and is not counted in the queue's depth.
local h = redis.call('HMGET', KEY.RUN, F.STATUS, F.TENANT, F.GEN)
if not h[1] then return {V.UNKNOWN} end
if ARG.TENANT ~= '' and h[2] ~= ARG.TENANT then return {V.UNKNOWN} end
if is_terminal(h[1]) then return {V.FINISHED, h[1]} end
if h[1] == S.QUEUED or h[1] == S.SCHEDULED then
  local jid = job_id(ARG.RUN_ID, tonumber(h[3] or '1'))
  local unclaimed = redis.call('ZREM', SCHEDULED, jid) == 1
  if redis.call('ZREM', QUEUE, jid) == 1 or redis.call('ZREM', tenant_held_key(h[2] or ''), jid) == 1 then
    depth_down(run_priority(ARG.RUN_ID))
    unclaimed = true
  end
  if unclaimed then redis.call('DEL', ctx().job_key .. jid) end
end
if h[1] == S.QUEUED or h[1] == S.SCHEDULED or h[1] == S.AWAITING_HUMAN or h[1] == S.AWAITING_TOOLS
    or h[1] == S.AWAITING_CHILDREN or h[1] == S.AWAITING_MODEL then
  finalize(KEY.RUN, KEY.STREAM, KEY.TOOLS, ARG.RUN_ID, S.ABORTED, 'aborted', ARG.REASON, ARG.ACTOR)
  return {V.ABORTED, h[1]}
end
request_abort(ARG.RUN_ID, ARG.REASON, ARG.ACTOR)
return {V.REQUESTED, h[1]}
