-- A caller's results for client tool calls, all or none: each must name a client call of the run;
-- a repeat of a recorded result is a no-op, a different one a conflict. When the run is parked and
-- this completes its calls, it goes back on the queue.
-- KEYS: run, tools   ARGV: runId, tenant ('' = any), n, then toolCallId, content, isError ('1'|'') × n
local h = redis.call('HMGET', KEYS[1], F.STATUS, F.TENANT)
if not h[1] then return {'unknown_run'} end
if ARGV[2] ~= '' and h[2] ~= ARGV[2] then return {'unknown_run'} end
local finished = is_terminal(h[1])  -- then only exact repeats are answered (as no-ops)
local now = now_ms()
local n = tonumber(ARGV[3])
local out = {'recorded'}
local new = {}
for k = 0, n - 1 do
  local id, content, is_err = ARGV[4 + 3 * k], ARGV[5 + 3 * k], ARGV[6 + 3 * k] == '1'
  local rec = redis.call('HGET', KEYS[2], id)
  if not rec then return finished and {'finished', h[1]} or {'unknown_call', id} end
  local r = cjson.decode(rec)
  if finished and r.state ~= TS.DONE then return {'finished', h[1]} end
  if not r.client then return {'not_client', id} end
  local prev = nil
  if r.state == TS.DONE then
    if r.timedOut then return {'timed_out', id} end
    prev = r.result
  elseif new[id] then
    prev = new[id].result
  elseif now >= (tonumber(r.deadlineMs or 0) or 0) then
    return {'timed_out', id}
  end
  if prev then
    if prev.content ~= content or (prev.isError == true) ~= is_err then
      return finished and {'finished', h[1]} or {'conflict', id}
    end
    out[#out + 1] = 'duplicate'
  else
    new[id] = {state = TS.DONE, client = true, calledAt = r.calledAt,
      result = {toolCallId = id, name = r.name, content = content, isError = is_err}}
    out[#out + 1] = 'recorded'
  end
end
for id, rec in pairs(new) do redis.call('HSET', KEYS[2], id, cjson.encode(rec)) end
if h[1] == S.AWAITING_TOOLS then
  local open = client_settle(KEYS[1], KEYS[2], now)
  if open == 0 then
    client_resume(KEYS[1], ARGV[1], now)
    out[1] = 'resumed'
  end
end
return out
