-- KEYS: run, stream, tools, live
-- ARGV: [1] epoch [2] firstSeq [3] maxlen [4] retention [5] leaseMs [6] runId [7] status ('' = still
--   running) [8] aux (result JSON when terminal, approvals JSON when awaiting_human) [9] ckpt ('' =
--   unchanged) [10] nEvents, then kind, ts, payload per event; nClaims, ids; nRecords, id, json;
--   sessionId, run loop JSON ('' = none), nToolResults, id, json; approvalTimeoutMs ('' = none),
--   run deadline ms (maxRunDurationMs from the start; '' = none; bounds an approval wait too),
--   iterations ('' = unchanged; kept as a field so scripts that end a run report it without
--   parsing the checkpoint).
local h = redis.call('HMGET', KEYS[1], 'epoch', 'lastSeq', 'owner')
if not h[1] then return {'missing'} end
if tonumber(h[1]) ~= tonumber(ARGV[1]) then return {'fenced', h[1]} end
-- A worker past its lease writes nothing, even before anyone took its runs over.
if not worker_alive(h[3], now_ms()) then return {'fenced', h[1]} end
local first = tonumber(ARGV[2])
if tonumber(h[2]) ~= first - 1 then
  -- The same commit sent again after its reply was lost (redis-py retries on connection errors):
  -- same epoch, the stream ends where this batch ends, with this batch's last event. It was
  -- applied; answer as the first time did instead of refusing the worker its own write.
  local n0 = tonumber(ARGV[10])
  local last0 = first + n0 - 1
  if n0 > 0 and tonumber(h[2]) == last0 then
    local e = redis.call('XRANGE', KEYS[2], last0 .. '-0', last0 .. '-0')
    if #e == 1 then
      local f = {}
      for k = 1, #e[1][2], 2 do f[e[1][2][k]] = e[1][2][k + 1] end
      if f.epoch == ARGV[1] and f.payload == ARGV[10 + 3 * n0] then return {'ok', h[2]} end
    end
  end
  return {'seq_conflict', h[2]}
end
local i = 10
local n = tonumber(ARGV[i]); i = i + 1
for k = 0, n - 1 do
  xadd(KEYS[2], first + k, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[3], ARGV[1])
  i = i + 3
end
local last = first + n - 1
local nc = tonumber(ARGV[i]); i = i + 1
for k = 1, nc do
  local prev = redis.call('HGET', KEYS[3], ARGV[i])
  local attempts = 0
  if prev then attempts = cjson.decode(prev).attempts or 0 end
  redis.call('HSET', KEYS[3], ARGV[i],
    cjson.encode({state = 'pending', epoch = tonumber(ARGV[1]), attempts = attempts + 1}))
  i = i + 1
end
local nr = tonumber(ARGV[i]); i = i + 1
for k = 1, nr do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local sid = ARGV[i]; local loop = ARGV[i + 1]; i = i + 2
local ntr = tonumber(ARGV[i]); i = i + 1
local trs = {}
for k = 1, ntr do
  trs[#trs + 1] = ARGV[i]; trs[#trs + 1] = ARGV[i + 1]
  i = i + 2
end
local approval_timeout = ARGV[i]
local run_deadline = ARGV[i + 1] or ''
local iterations = ARGV[i + 2] or ''
if n > 0 then redis.call('HSET', KEYS[1], 'lastSeq', last) end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'ckpt', ARGV[9]) end
if iterations ~= '' then redis.call('HSET', KEYS[1], 'iterations', iterations) end
local status = ARGV[7]
local now = now_ms()
if status ~= '' then leave_worker(KEYS[1], ARGV[6]) end
if status == '' then
  -- still running: its worker's lease covers it
elseif is_terminal(status) then
  track(KEYS[1], ARGV[6], redis.call('HGET', KEYS[1], 'status'), status)
  redis.call('HSET', KEYS[1], 'status', status, 'result', ARGV[8], 'owner', '', 'leaseUntil', 0,
    'finishedAt', now)
  redis.call('ZREM', KEYS[4], ARGV[6])
  redis.call('ZREM', AWAITING, ARGV[6])
  local wh = redis.call('HGET', KEYS[1], 'webhook')
  if wh and wh ~= '' then redis.call('LPUSH', WEBHOOKS, ARGV[6]) end
  if sid ~= '' then
    if loop ~= '' then
      redis.call('RPUSH', session_key(sid) .. ':loops', loop)
      redis.call('LTRIM', session_key(sid) .. ':loops', -1000, -1)
    end
    if #trs > 0 then redis.call('HSET', session_key(sid) .. ':toolresults', unpack(trs)) end
    -- A session's history lives for the retention after its latest run ended.
    local skey = session_key(sid)
    redis.call('LTRIM', skey .. ':runs', -1000, -1)
    for _, k in ipairs({skey .. ':loops', skey .. ':toolresults', skey .. ':runs'}) do
      redis.call('EXPIRE', k, ARGV[4])
    end
    session_advance(sid, ARGV[6])
  end
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  redis.call('EXPIRE', KEYS[3], ARGV[4])
elseif status == 'awaiting_human' then
  track(KEYS[1], ARGV[6], redis.call('HGET', KEYS[1], 'status'), status)
  redis.call('HSET', KEYS[1], 'status', status, 'approvals', ARGV[8], 'owner', '', 'leaseUntil', 0,
    'awaitingSince', now, 'approvalTimeoutMs', approval_timeout, 'runDeadlineMs', run_deadline)
  redis.call('ZADD', AWAITING, now, ARGV[6])
  -- the reconciler ends the wait at the approval timeout or the run's deadline, whichever is first
  local due = nil
  if approval_timeout ~= '' then due = now + tonumber(approval_timeout) end
  if run_deadline ~= '' and (not due or tonumber(run_deadline) < due) then due = tonumber(run_deadline) end
  if due then
    redis.call('ZADD', KEYS[4], due, ARGV[6])
  else
    redis.call('ZREM', KEYS[4], ARGV[6])
  end
elseif status == 'awaiting_tools' then
  -- ARGV[8]: the pending client calls. Parked on no worker until each has a result or times out.
  track(KEYS[1], ARGV[6], redis.call('HGET', KEYS[1], 'status'), status)
  redis.call('HSET', KEYS[1], 'status', status, 'clientPending', ARGV[8], 'owner', '', 'leaseUntil', 0,
    'awaitingSince', now)
  local open, earliest = client_settle(KEYS[1], KEYS[3], now)
  if open == 0 then
    client_resume(KEYS[1], ARGV[6], now)
  else
    redis.call('ZADD', KEYS[4], earliest, ARGV[6])
  end
end
return {'ok', tostring(last)}
