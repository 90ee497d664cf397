-- A decision past the approval timeout or the run's deadline comes too late: the run ends then and
-- there (as the reconciler would end it) and the decision is refused like one for a finished run.
-- The call: shared.calls.approvals.SettleApproval. The decision keeps who made it (its actor).
local h = redis.call('HMGET', KEY.RUN, F.STATUS, F.APPROVALS, F.GEN, F.TENANT)
if not h[1] then return {V.UNKNOWN_RUN} end
if ARG.TENANT ~= '' and h[4] ~= ARG.TENANT then return {V.UNKNOWN_RUN} end
if h[1] ~= S.AWAITING_HUMAN then return {V.NOT_AWAITING, h[1]} end
local code, message = approval_expired(KEY.RUN, now_ms())
if code then
  finalize(KEY.RUN, KEY.STREAM, KEY.TOOLS, ARG.RUN_ID, S.FAILED, code, message)
  return {V.NOT_AWAITING, S.FAILED}
end
local approvals = cjson.decode(h[2])
local entry = approvals[ARG.TOOL_CALL_ID]
if entry == nil then return {V.UNKNOWN_CALL} end
if entry.decision ~= 'pending' then return {V.ALREADY_DECIDED, entry.decision} end
entry.decision = ARG.DECISION
if ARG.REASON ~= '' then entry.reason = ARG.REASON end
if ARG.ACTOR ~= '' then entry.actor = cjson.decode(ARG.ACTOR) end
local open = 0
for _, e in pairs(approvals) do if e.decision == 'pending' then open = open + 1 end end
redis.call('HSET', KEY.RUN, F.APPROVALS, cjson.encode(approvals))
if open > 0 then return {V.RECORDED, tostring(open)} end
local gen = tonumber(h[3]) + 1
redis.call('HSET', KEY.RUN, F.GEN, gen, F.STATUS, S.QUEUED)
track(KEY.RUN, ARG.RUN_ID, h[1], S.QUEUED)
enqueue_gen(ARG.RUN_ID, gen, now_ms())
redis.call('ZREM', AWAITING, ARG.RUN_ID)
return {V.RESUMED, '0'}
