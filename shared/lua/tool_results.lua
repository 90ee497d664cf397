-- A caller's results for client tool calls, all or none: each must name a client call of the run;
-- a repeat of a recorded result is a no-op, a different one a conflict. When the run is parked and
-- this completes its calls, it goes back on the queue.
-- The call: shared.calls.results.ToolResults. Each new result's record keeps who sent it (its actor).
-- The resume writes the run's next event, the tool_result of its first client call, as the machine's
-- on_client_results builds it (worker/machine/tool_round.py tool_result_emits: the content as the
-- record holds it, sealed when payloads are sealed at rest); a call that timed out leaves it to the
-- worker (its error text is the worker's to seal).
local function first_result_event()
  local raw = redis.call('HGET', KEY.RUN, F.CLIENT_PENDING)
  local pending = raw and raw ~= '' and cjson.decode(raw) or {}
  local id = pending[1] and pending[1].toolCallId
  local rec = id and redis.call('HGET', KEY.TOOLS, id)
  if not rec then return end
  local r = cjson.decode(rec)
  local res = r.result
  if r.state ~= TS.DONE or r.timedOut or type(res) ~= 'table' or type(r.calledAt) ~= 'number' then return end
  local actor = type(r.actor) == 'table' and (',"actor":' .. cjson.encode(r.actor)) or ''
  answer_event(KEY.RUN, KEY.STREAM, KEY.ANSWER_WORKERS, EVENT.TOOL_RESULT, id, '{"toolCallId":' .. cjson.encode(id) .. ',"name":'
    .. cjson.encode(res.name) .. ',"content":' .. cjson.encode(res.content) .. ',"isError":'
    .. tostring(res.isError == true) .. ',"calledAt":' .. int_text(r.calledAt) .. actor .. '}')
end
local h = redis.call('HMGET', KEY.RUN, F.STATUS, F.TENANT)
if not h[1] then return {V.UNKNOWN_RUN} end
if ARG.TENANT ~= '' and h[2] ~= ARG.TENANT then return {V.UNKNOWN_RUN} end
local finished = is_terminal(h[1])  -- then only exact repeats are answered (as no-ops)
local now = now_ms()
local n = tonumber(ARG.COUNT)
local out = {V.RECORDED}
local new = {}
local actor = ARG.ACTOR ~= '' and cjson.decode(ARG.ACTOR) or nil
for k = 0, n - 1 do
  local id, content, is_err = ARGV[ARGN.RESULTS + 3 * k], ARGV[ARGN.RESULTS + 1 + 3 * k], ARGV[ARGN.RESULTS + 2 + 3 * k] == '1'
  local rec = redis.call('HGET', KEY.TOOLS, id)
  if not rec then return finished and {V.FINISHED, h[1]} or {V.UNKNOWN_CALL, id} end
  local r = cjson.decode(rec)
  if finished and r.state ~= TS.DONE then return {V.FINISHED, h[1]} end
  if not r.client then return {V.NOT_CLIENT, id} end
  local prev = nil
  if r.state == TS.DONE then
    if r.timedOut then return {V.TIMED_OUT, id} end
    prev = r.result
  elseif new[id] then
    prev = new[id].result
  elseif now >= (tonumber(r.deadlineMs or 0) or 0) then
    return {V.TIMED_OUT, id}
  end
  if prev then
    if prev.content ~= content or (prev.isError == true) ~= is_err then
      return finished and {V.FINISHED, h[1]} or {V.CONFLICT, id}
    end
    out[#out + 1] = V.DUPLICATE
  else
    new[id] = {state = TS.DONE, client = true, calledAt = r.calledAt, actor = actor,
      result = {toolCallId = id, name = r.name, content = content, isError = is_err}}
    out[#out + 1] = V.RECORDED
  end
end
for id, rec in pairs(new) do redis.call('HSET', KEY.TOOLS, id, cjson.encode(rec)) end
if h[1] == S.AWAITING_TOOLS then
  local open = client_settle(KEY.RUN, KEY.TOOLS, now)
  if open == 0 then
    first_result_event()
    client_resume(KEY.RUN, ARG.RUN_ID, now)
    out[1] = V.RESUMED
  end
end
return out
