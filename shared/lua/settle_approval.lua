-- A decision past the approval timeout or the run's deadline comes too late: the run ends then and
-- there (as the reconciler would end it) and the decision is refused like one for a finished run.
-- The call: shared.calls.approvals.SettleApproval. The decision keeps who made it (its actor).
-- The last decision writes the run's next event, the approval of its first call (the lowest position
-- of the round's ids, c<index>.<position>: docs/api.md, Tool-call ids), as the machine's on_approvals
-- builds it (worker/machine/steps.py approval_emit); one with a reason leaves it to the worker when
-- payloads are sealed at rest (ARG.SEALED: the reason is the worker's to seal).
local function first_approval_event(approvals)
  local first, at = nil, nil
  for id in pairs(approvals) do
    local pos = tonumber(string.match(id, '^c%d+%.(%d+)$'))
    if not pos then return end
    if not at or pos < at then first, at = id, pos end
  end
  local e = first and approvals[first]
  if not e or (e.reason and ARG.SEALED == '1') then return end
  local reason = e.reason and (',"reason":' .. cjson.encode(e.reason)) or ''
  local actor = type(e.actor) == 'table' and (',"actor":' .. cjson.encode(e.actor)) or ''
  answer_event(KEY.RUN, KEY.STREAM, KEY.ANSWER_WORKERS, EVENT.APPROVAL, first, '{"toolCallId":' .. cjson.encode(first) .. ',"name":'
    .. cjson.encode(e.name) .. ',"decision":' .. cjson.encode(e.decision) .. reason .. actor .. '}')
end
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
first_approval_event(approvals)
local gen = tonumber(h[3]) + 1
redis.call('HSET', KEY.RUN, F.GEN, gen, F.STATUS, S.QUEUED)
track(KEY.RUN, ARG.RUN_ID, h[1], S.QUEUED)
enqueue_gen(ARG.RUN_ID, gen, now_ms())
redis.call('ZREM', AWAITING, ARG.RUN_ID)
return {V.RESUMED, '0'}
