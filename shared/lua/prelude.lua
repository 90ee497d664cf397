-- The prelude of every script: the clock, key names, and the helpers the scripts share.
local FIXED_NOW = nil  -- set by a script that creates many runs: one clock reading for all of them
local function now_ms()
  if FIXED_NOW then return FIXED_NOW end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local WEBHOOKS = '__WEBHOOKS__'
local QUEUE = '__QUEUE__'
local LIVE = '__LIVE__'
local AWAITING = '__AWAITING__'
local WORKERS = '__WORKERS__'
local function run_key(id) return '__PREFIX__:{' .. id .. '}:run' end
local function stream_key(id) return '__PREFIX__:{' .. id .. '}:events' end
local function tools_key(id) return '__PREFIX__:{' .. id .. '}:tools' end
local function session_key(sid) return '__PREFIX__:s:{' .. sid .. '}' end
local function tenant_running_key(t) return '__PREFIX__:tenant:' .. t .. ':running' end
local function worker_runs_key(w) return '__PREFIX__:w:{' .. w .. '}:runs' end
local function worker_inbox_key(w) return '__PREFIX__:w:{' .. w .. '}:inbox' end
-- Is this worker lease id's lease unexpired (Redis time)?
local function worker_alive(w, now)
  if not w or w == '' then return false end
  local exp = redis.call('ZSCORE', WORKERS, w)
  return exp ~= false and exp ~= nil and tonumber(exp) > now
end
-- The run leaves its worker (finished, handed back, waiting for someone): out of the worker's set.
local function leave_worker(run, run_id)
  local owner = redis.call('HGET', run, 'owner')
  if owner and owner ~= '' then redis.call('SREM', worker_runs_key(owner), run_id) end
end
-- Ask the worker running a run to abort it: the run hash holds the reason, the inbox the nudge.
local function request_abort(run_id, reason)
  redis.call('HSET', run_key(run_id), 'abort', reason)
  local owner = redis.call('HGET', run_key(run_id), 'owner')
  if owner and owner ~= '' then
    local inbox = worker_inbox_key(owner)
    redis.call('RPUSH', inbox, run_id)
    redis.call('LTRIM', inbox, -10000, -1)
  end
end
local TERMINAL = {__TERMINAL__}  -- shared.statuses.TERMINAL
local function is_terminal(s)
  return TERMINAL[s] == true
end
local function xadd(stream, seq, kind, ts, payload, maxlen, epoch)
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, seq .. '-0',
    'seq', seq, 'kind', kind, 'ts', ts, 'payload', payload, 'epoch', epoch)
end
-- Listing indexes and batch counters (keys.index_key, keys.batch_key): each index is a zset
-- runId -> createdAt, trimmed to __INDEX_MAX__ entries and expiring a retention after its last write.
local function tenant_prefix(t) return '__PREFIX__:t:' .. t end
local function batch_key(t, b) return tenant_prefix(t) .. ':batch:' .. b end
-- While a script creates many runs, DEFERRED collects its ZADDs (key -> score, member, …) and TRIM
-- the indexes they touch: one ZADD per key and one trim per index at the end (flush_deferred).
local DEFERRED, TRIM = nil, nil
local function ix_trim(k)
  redis.call('ZREMRANGEBYRANK', k, 0, -__INDEX_MAX__ - 1)
  redis.call('EXPIRE', k, __RETENTION__)
end
local function zadd(k, score, member)
  if not DEFERRED then return redis.call('ZADD', k, score, member) end
  local t = DEFERRED[k]
  if not t then t = {}; DEFERRED[k] = t end
  t[#t + 1] = score; t[#t + 1] = member
end
local BATCH_NEW = nil  -- while deferring: batch key -> {tenant, batchId, runs created}
-- n runs were created in a batch: create its hash if needed, count them (all start queued).
local function batch_add(t, batch, n, now)
  local bk = batch_key(t, batch)
  if redis.call('HSETNX', bk, 'createdAt', now) == 1 then redis.call('HSET', bk, 'batchId', batch, 'tenant', t) end
  redis.call('HINCRBY', bk, 'total', n)
  redis.call('HINCRBY', bk, 'queued', n)
  redis.call('HDEL', bk, 'finishedAt')
  redis.call('EXPIRE', bk, __RETENTION__)
end
local function flush_deferred()
  if not DEFERRED then return end
  for k, t in pairs(DEFERRED) do
    for i = 1, #t, 1000 do redis.call('ZADD', k, unpack(t, i, math.min(i + 999, #t))) end
  end
  for k in pairs(TRIM) do ix_trim(k) end
  for _, b in pairs(BATCH_NEW) do batch_add(b[1], b[2], b[3], now_ms()) end
  DEFERRED, TRIM, BATCH_NEW = {}, {}, {}
end
-- A batch is finished once every run it has ended and no part is still to come (field open: the
-- latest request said more); then, once, its webhook is queued. A finished batch takes no new runs.
local function batch_settle(bk)
  local b = redis.call('HMGET', bk, 'done', 'total', 'open', 'finishedAt', 'webhook')
  if b[4] or b[3] == '1' or tonumber(b[1] or '0') < tonumber(b[2] or '0') then return false end
  redis.call('HSET', bk, 'finishedAt', now_ms())
  if (b[5] or '') ~= '' then redis.call('LPUSH', WEBHOOKS, '__BATCH_DELIVERY__' .. bk) end
  return true
end
local BATCH_FINISHED = {}  -- batch key -> finished, looked up once per script call
local function batch_finished(t, batch)
  local bk = batch_key(t, batch)
  if BATCH_FINISHED[bk] == nil then BATCH_FINISHED[bk] = redis.call('HEXISTS', bk, 'finishedAt') == 1 end
  return BATCH_FINISHED[bk]
end
local function ix_add(t, dim, value, id, score)
  local k = tenant_prefix(t) .. ':ix:' .. dim .. ':' .. value
  zadd(k, score, id)
  if TRIM then TRIM[k] = true else ix_trim(k) end
end
-- A run's status changed from old ('' = just created) to new: move it between its tenant's status
-- indexes and its batch's counters. Every script that changes a run's status calls this, in the same
-- call, so the counters are the runs' real statuses. The batch's last run to end marks it finished
-- (batch_settle).
local function track(run, id, old, new)
  old = old or ''
  if old == new then return end
  local h = redis.call('HMGET', run, 'tenant', 'createdAt', 'batch')
  if not h[1] then return end
  if old ~= '' then redis.call('ZREM', tenant_prefix(h[1]) .. ':ix:status:' .. old, id) end
  ix_add(h[1], 'status', new, id, tonumber(h[2] or '0'))
  if not h[3] or h[3] == '' then return end
  local bk = batch_key(h[1], h[3])
  if redis.call('EXISTS', bk) == 0 then return end
  if old ~= '' then redis.call('HINCRBY', bk, old, -1) end
  redis.call('HINCRBY', bk, new, 1)
  redis.call('EXPIRE', bk, __RETENTION__)
  if is_terminal(new) and not is_terminal(old) then
    redis.call('HINCRBY', bk, 'done', 1)
    redis.call('EXPIRE', tenant_prefix(h[1]) .. ':ix:batch:' .. h[3], __RETENTION__)
    batch_settle(bk)
  end
end
-- Put dispatch 1 of a run on arq's queue (the JSON arq's worker reads with our serializer).
local function enqueue_first(id, now)
  redis.call('SET', '__JOBPREFIX__' .. id,
    cjson.encode({t = cjson.null, f = '__FUNCTION__', a = {id, 1}, k = {}, et = now}), 'PX', __JOB_EXPIRE_MS__)
  redis.call('ZADD', QUEUE, now, id)
  redis.call('ZADD', LIVE, now + __QUEUED_CHECK_MS__, id)
end
-- Put dispatch ``gen`` of a run on arq's queue (job id ``runId#gen`` past the first, keys.job_id).
local function enqueue_gen(id, gen, now)
  local jid = id
  if gen > 1 then jid = id .. '#' .. gen end
  redis.call('SET', '__JOBPREFIX__' .. jid,
    cjson.encode({t = cjson.null, f = '__FUNCTION__', a = {id, gen}, k = {}, et = now}), 'PX', __JOB_EXPIRE_MS__)
  redis.call('ZADD', QUEUE, now, jid)
  redis.call('ZADD', LIVE, now + __QUEUED_CHECK_MS__, id)
end
-- A run waiting for client tool results (run field clientPending: the calls, JSON): every call
-- still pending past its deadline gets a timeout error as its result. Returns how many calls are
-- still open and the earliest open deadline (Redis time decides, as for leases).
local function client_settle(run, tools, now)
  local raw = redis.call('HGET', run, 'clientPending')
  if not raw or raw == '' then return 0, 0 end
  local open, earliest = 0, 0
  for _, p in ipairs(cjson.decode(raw)) do
    local rec = redis.call('HGET', tools, p.toolCallId)
    if rec then
      local r = cjson.decode(rec)
      if r.state == 'client_pending' then
        local deadline = tonumber(r.deadlineMs or 0) or 0
        if now >= deadline then
          local msg = 'error: the client returned no result within ' .. tostring(r.timeoutMs or '?') .. ' ms'
          redis.call('HSET', tools, p.toolCallId, cjson.encode({state = 'done', client = true, timedOut = true,
            result = {toolCallId = p.toolCallId, name = r.name, content = msg, isError = true}}))
        else
          open = open + 1
          if earliest == 0 or deadline < earliest then earliest = deadline end
        end
      end
    end
  end
  return open, earliest
end
-- Every client call of a parked run has its result: back on the queue as dispatch gen + 1.
local function client_resume(run, run_id, now)
  local gen = tonumber(redis.call('HGET', run, 'gen')) + 1
  track(run, run_id, redis.call('HGET', run, 'status'), 'queued')
  redis.call('HSET', run, 'gen', gen, 'status', 'queued', 'owner', '', 'leaseUntil', 0)
  enqueue_gen(run_id, gen, now)
end
-- The session's active run ended: start the next run waiting on the session, if any.
local function session_advance(sid, finished)
  if not sid or sid == '' then return end
  local skey = session_key(sid)
  if redis.call('HGET', skey, 'activeRun') ~= finished then return end
  while true do
    local nxt = redis.call('LPOP', skey .. ':pending')
    if not nxt then
      redis.call('HSET', skey, 'activeRun', '')
      return
    end
    if redis.call('HGET', run_key(nxt), 'status') == 'queued' then
      redis.call('HSET', skey, 'activeRun', nxt)
      redis.call('HSET', run_key(nxt), 'held', '')
      enqueue_first(nxt, now_ms())
      return
    end
  end
end
-- End a run from outside its worker (abort while queued or awaiting approval, crash budget spent,
-- approval timeout). Bumps the epoch so any worker still holding the run is fenced off.
local function finalize(run, stream, tools, live, run_id, status, code, message, maxlen, retention)
  flush_deferred()  -- a run created earlier in this script may be the one ending
  local h = redis.call('HMGET', run, 'lastSeq', 'sessionId', 'iterations', 'epoch', 'status')
  local seq = tonumber(h[1] or '0') + 1
  local iterations = tonumber(h[3] or '0')
  local err = {code = code, message = message, retryable = false}
  local result = {runId = run_id, status = status, iterations = iterations, lastError = err}
  if h[2] and h[2] ~= '' then result.sessionId = h[2] end
  local ts = now_ms()
  leave_worker(run, run_id)
  if status == 'failed' then  -- the machine's order: the run's error event, then its status
    xadd(stream, seq, 'error', ts, cjson.encode({scope = 'run', code = code, message = message, retryable = false}),
      maxlen, tonumber(h[4] or '0') + 1)
    seq = seq + 1
  end
  xadd(stream, seq, 'status', ts, cjson.encode({status = status, iterations = iterations, error = err}), maxlen,
    tonumber(h[4] or '0') + 1)
  redis.call('HSET', run, 'status', status, 'result', cjson.encode(result), 'lastSeq', seq,
    'owner', '', 'leaseUntil', 0, 'epoch', tonumber(h[4] or '0') + 1, 'finishedAt', ts, 'abort', '')
  redis.call('ZREM', live, run_id)
  redis.call('ZREM', AWAITING, run_id)
  track(run, run_id, h[5], status)
  local wh = redis.call('HGET', run, 'webhook')
  if wh and wh ~= '' then redis.call('LPUSH', WEBHOOKS, run_id) end
  session_advance(h[2], run_id)
  redis.call('EXPIRE', run, retention)
  redis.call('EXPIRE', stream, retention)
  redis.call('EXPIRE', tools, retention)
  return seq
end
-- A run awaiting approval past its approval timeout or its maxRunDurationMs (whichever came first):
-- the lastError code and message it ends with, or nil, nil and when the wait ends (nil: never).
local function approval_expired(run, now)
  local h = redis.call('HMGET', run, 'awaitingSince', 'approvalTimeoutMs', 'runDeadlineMs')
  local timeout = tonumber(h[2] or '') or 0
  local approval_at = timeout > 0 and (tonumber(h[1] or '0') or 0) + timeout or nil
  local run_at = tonumber(h[3] or '')
  if run_at and now >= run_at and (not approval_at or run_at <= approval_at) then
    return 'max_run_duration', 'loopLimits.maxRunDurationMs reached while awaiting approval'
  end
  if approval_at and now >= approval_at then
    return 'approval_timeout', 'no approval decision within ' .. timeout .. ' ms'
  end
  if run_at and (not approval_at or run_at < approval_at) then return nil, nil, run_at end
  return nil, nil, approval_at
end
