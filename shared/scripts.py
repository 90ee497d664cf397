"""Every multi-key Redis change, as a Lua script registered once per client.

The run hash (keys.run_key) is the source of truth: ``status``, ``gen`` (dispatch number, one arq
job each), ``epoch`` (fencing token, taken by every job start), ``owner`` (the lease id of the worker
running it), ``lastSeq`` (the stream's last seq), ``ckpt`` (the machine state), ``result``.

Liveness is per worker, not per run: each worker renews one entry in keys.WORKERS (its lease
expiry) per beat, whatever its number of runs, and keeps the runs it holds in its runs set. A run
is carried while its owner's lease is unexpired; the reconciler re-dispatches the runs of a worker
whose lease expired. Abort requests for a running run go to its owner's inbox, read by the beat.

Guarantees the scripts give:
- the stream holds seq 1..n exactly: every append checks ``lastSeq == first - 1`` and uses the
  entry id ``<seq>-0``, so Redis itself refuses a repeat;
- a writer whose epoch is not the run's current epoch is refused (``fenced``) and writes nothing;
- events, checkpoint, tool claims and tool results of one step land in one atomic commit.

Time comes from Redis (``TIME``), so worker clocks never decide whose lease has expired.
A run that ends with a webhook configured is pushed on keys.WEBHOOKS for delivery.
Scripts that enqueue an arq job also touch arq's queue key, which is outside the run's hash slot:
that is fine on a single Redis or Sentinel (what arq supports), not on Cluster.
"""

from __future__ import annotations

import functools
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from shared import keys, limits
from shared.statuses import TERMINAL

__all__ = [
    "ABORT",
    "ACQUIRE",
    "ADMIT_TENANT",
    "BEAT",
    "CAPACITY_ACQUIRE",
    "CAPACITY_PAUSE",
    "CAPACITY_RELEASE",
    "CAPACITY_RENEW",
    "CLAIM_JOBS",
    "CLAIM_WEBHOOKS",
    "COMMIT",
    "FORGET_WORKER",
    "LIST_RUNS",
    "PRELUDE",
    "REDISPATCH",
    "RELEASE",
    "SETTLE_APPROVAL",
    "SUBMIT",
    "SUBMIT_MANY",
    "SUBMIT_ONE",
    "TOOL_RESULTS",
    "Scripts",
    "text",
]

PRELUDE = r"""
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
  local h = redis.call('HMGET', run, 'lastSeq', 'sessionId', 'ckpt', 'epoch', 'status')
  local seq = tonumber(h[1] or '0') + 1
  local iterations = 0
  if h[3] then
    local ok, c = pcall(cjson.decode, h[3])
    if ok and type(c) == 'table' and type(c.state) == 'table' and c.state.iterations then
      iterations = c.state.iterations
    end
  end
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
"""

# KEYS: run, arq job key, arq queue, live, session, session pending, session runs
# ARGV: runId, input, inputHash, tenant, sessionId, job payload, jobExpireMs, queuedCheckMs, webhook,
#       autoCreateSession ('1' or ''), multitaskStrategy (enqueue | reject | interrupt),
#       batchId ('' = none), agent, nMeta, then nMeta 'key=value' strings (the indexed metadata),
#       then the id the client chose when runId is its tenant-scoped id (absent or '' otherwise)
SUBMIT_ONE = r"""
-- The listing indexes and the batch of a run just created (A as submit_one's).
local function index_new(run, A, now)
  local t, id, batch = A[4], A[1], A[12] or ''
  ix_add(t, 'all', '', id, now)
  if A[13] then ix_add(t, 'agent', A[13], id, now) end
  if A[5] ~= '' then ix_add(t, 'session', A[5], id, now) end
  if batch ~= '' then
    if BATCH_NEW then
      local b = BATCH_NEW[batch]
      if not b then b = {t, batch, 0}; BATCH_NEW[batch] = b end
      b[3] = b[3] + 1
    else
      batch_add(t, batch, 1, now)
    end
    ix_add(t, 'batch', batch, id, now)
  end
  for j = 1, tonumber(A[14] or '0') do ix_add(t, 'meta', A[14 + j], id, now) end
  ix_add(t, 'status', 'queued', id, now)
end
local function submit_one(K, A)
  if redis.call('EXISTS', K[1]) == 1 then
    local h = redis.call('HMGET', K[1], 'inputHash', 'status', 'tenant')
    if h[3] ~= A[4] then return {'conflict', ''} end
    if h[1] == A[3] then return {'exists', h[2]} end
    return {'conflict', h[2]}
  end
  if (A[12] or '') ~= '' and batch_finished(A[4], A[12]) then return {'batch_finished', ''} end
  local now = now_ms()
  local dispatch = true
  if A[5] ~= '' then
    local s = redis.call('HMGET', K[5], 'tenant', 'activeRun')
    if not s[1] then
      if A[10] ~= '1' then return {'unknown_session', ''} end
      redis.call('HSET', K[5], 'tenant', A[4], 'createdAt', now, 'activeRun', '')
      s = {A[4], ''}
    elseif s[1] ~= A[4] then
      return {'unknown_session', ''}
    end
    local active = s[2]
    if active and active ~= '' then
      local st = redis.call('HGET', run_key(active), 'status')
      if st and not is_terminal(st) then
        if A[11] == 'reject' then return {'session_busy', active} end
        dispatch = false
        if A[11] == 'interrupt' then
          local why = 'interrupted by run ' .. A[1]
          for _, pid in ipairs(redis.call('LRANGE', K[6], 0, -1)) do
            if redis.call('HGET', run_key(pid), 'status') == 'queued' then
              finalize(run_key(pid), stream_key(pid), tools_key(pid), LIVE, pid, 'aborted', 'aborted', why,
                __MAXLEN__, __RETENTION__)
            end
          end
          redis.call('DEL', K[6])
          if st == 'running' then
            request_abort(active, why)
          else
            finalize(run_key(active), stream_key(active), tools_key(active), LIVE, active, 'aborted', 'aborted', why,
              __MAXLEN__, __RETENTION__)
            dispatch = true
          end
        end
      end
    end
    redis.call('RPUSH', K[7], A[1])
    if dispatch then
      redis.call('HSET', K[5], 'activeRun', A[1])
    else
      redis.call('RPUSH', K[6], A[1])
    end
  end
  redis.call('HSET', K[1], 'status', 'queued', 'input', A[2], 'inputHash', A[3],
    'tenant', A[4], 'sessionId', A[5], 'createdAt', now, 'gen', 1, 'epoch', 0, 'lastSeq', 0,
    'owner', '', 'leaseUntil', 0, 'restarts', 0, 'webhook', A[9], 'abort', '', 'held', dispatch and '' or '1',
    'agent', A[13] or '', 'batch', A[12] or '')
  local client_id = A[15 + tonumber(A[14] or '0')]
  if client_id and client_id ~= '' then redis.call('HSET', K[1], 'clientId', client_id) end
  index_new(K[1], A, now)
  if dispatch then
    redis.call('SET', K[2], A[6], 'PX', A[7])
    zadd(K[3], now, A[1])
    zadd(K[4], now + tonumber(A[8]), A[1])
  end
  return {'created', 'queued'}
end
"""
SUBMIT = SUBMIT_ONE + "return submit_one(KEYS, ARGV)\n"

# Many runs of one tenant in one call (the batch path): the keys are derived here, not passed, and
# the runs' small fields travel as one JSON array (a few arguments instead of a dozen per run).
# ARGV: tenant, batchId ('' = none), batch webhook ('' = none), jobExpireMs, queuedCheckMs,
#   runs JSON [[runId, inputHash, sessionId, webhook, autoCreateSession, multitaskStrategy, agent,
#   [metadata 'key=value' terms]], …], then each run's input.   Reply: verdict, status per run.
SUBMIT_MANY = (
    SUBMIT_ONE
    + r"""
local t, batch = ARGV[1], ARGV[2]
local runs = cjson.decode(ARGV[6])
local out = {}
DEFERRED, TRIM, BATCH_NEW = {}, {}, {}
local now = now_ms()
FIXED_NOW = now
if batch ~= '' and redis.call('EXISTS', batch_key(t, batch)) == 1 and not batch_finished(t, batch) then
  redis.call('HSET', batch_key(t, batch), 'open', '1')  -- a run this call ends must not finish it
end
local job_tail = '",1],"k":{},"et":' .. now .. '}'  -- the arq job dispatch_payload writes; ids need no escaping
for n, r in ipairs(runs) do
  local id, sid, terms = r[1], r[3], r[8]
  local job = '{"t":null,"f":"__FUNCTION__","a":["' .. id .. job_tail
  local A = {id, ARGV[6 + n], r[2], t, sid, job, ARGV[4], ARGV[5], r[4], r[5], r[6], batch, r[7], #terms}
  for j = 1, #terms do A[14 + j] = terms[j] end
  local K = {run_key(id), '__JOBPREFIX__' .. id, QUEUE, LIVE}
  if sid ~= '' then
    local sk = session_key(sid)
    K[5], K[6], K[7] = sk, sk .. ':pending', sk .. ':runs'
  end
  local v = submit_one(K, A)
  out[#out + 1] = v[1]; out[#out + 1] = v[2]
end
flush_deferred()
if batch ~= '' and redis.call('EXISTS', batch_key(t, batch)) == 1 and not batch_finished(t, batch) then
  -- open until the request ends: its last chunk may not be here yet (BATCH_CLOSE closes it)
  redis.call('HSET', batch_key(t, batch), 'open', '1')
  if ARGV[3] ~= '' then redis.call('HSET', batch_key(t, batch), 'webhook', ARGV[3]) end
end
return out
"""
)

# The end of a batch request that did not say more: no part is still to come, so the batch is
# finished as soon as its runs have all ended (now, if they already have). ARGV: tenant, batchId
BATCH_CLOSE = r"""
local bk = batch_key(ARGV[1], ARGV[2])
if redis.call('EXISTS', bk) == 0 then return {'missing'} end
redis.call('HDEL', bk, 'open')
if redis.call('HEXISTS', bk, 'finishedAt') == 1 or batch_settle(bk) then return {'finished'} end
return {'closed'}
"""

# KEYS: run, stream, tools, live
# ARGV: runId, gen, worker lease id, leaseMs (unused), maxRestarts, maxlen, retention
# Refused (no_lease) unless the acquiring worker's own lease is unexpired.
ACQUIRE = r"""
local h = redis.call('HMGET', KEYS[1], 'status', 'gen', 'owner', 'leaseUntil', 'epoch', 'restarts')
if not h[1] then return {'missing'} end
if is_terminal(h[1]) then return {'terminal', h[1]} end
if tonumber(h[2]) ~= tonumber(ARGV[2]) then return {'superseded', h[2]} end
local now = now_ms()
if not worker_alive(ARGV[3], now) then return {'no_lease', ARGV[3]} end
if h[3] ~= '' and worker_alive(h[3], now) then return {'busy', h[3]} end
local restarts = tonumber(h[6] or '0')
if h[3] ~= '' then restarts = restarts + 1 end
if restarts > tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[1], 'restarts', restarts)
  finalize(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], 'failed', 'crash_limit',
    'the run lost its worker ' .. restarts .. ' times (AGENTMILL_MAX_CRASH_RESTARTS=' .. ARGV[5] .. ')',
    ARGV[6], ARGV[7])
  return {'exhausted', tostring(restarts)}
end
local epoch = tonumber(h[5]) + 1
if h[3] ~= '' then redis.call('SREM', worker_runs_key(h[3]), ARGV[1]) end
redis.call('HSET', KEYS[1], 'epoch', epoch, 'owner', ARGV[3], 'restarts', restarts, 'status', 'running')
track(KEYS[1], ARGV[1], h[1], 'running')
redis.call('SADD', worker_runs_key(ARGV[3]), ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])  -- a running run is watched through its worker's lease
local d = redis.call('HMGET', KEYS[1], 'lastSeq', 'ckpt', 'input', 'abort', 'approvals')
return {'ok', tostring(epoch), d[1] or '0', d[2] or '', d[3] or '', d[4] or '', d[5] or '',
  redis.call('HGETALL', KEYS[3]), tostring(restarts)}
"""

# KEYS: run, stream, tools, live
# ARGV: [1] epoch [2] firstSeq [3] maxlen [4] retention [5] leaseMs [6] runId [7] status ('' = still
#   running) [8] aux (result JSON when terminal, approvals JSON when awaiting_human) [9] ckpt ('' =
#   unchanged) [10] nEvents, then kind, ts, payload per event; nClaims, ids; nRecords, id, json;
#   sessionId, run loop JSON ('' = none), nToolResults, id, json; approvalTimeoutMs ('' = none),
#   run deadline ms (maxRunDurationMs from the start; '' = none; bounds an approval wait too).
COMMIT = r"""
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
if n > 0 then redis.call('HSET', KEYS[1], 'lastSeq', last) end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'ckpt', ARGV[9]) end
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
"""

# One worker heartbeat, O(1) whatever the worker's number of runs: renew its lease and take up to
# ARGV[3] abort nudges from its inbox, each answered with the run's epoch and abort reason (the run
# hash stays the truth). A lease that already expired is not renewed: the worker must give up its
# runs (``lost``). ARGV[4] = '1' registers a new lease id.
# KEYS: workers, inbox   ARGV: lease id, leaseMs, max messages, register
BEAT = r"""
local now = now_ms()
if ARGV[4] ~= '1' and not worker_alive(ARGV[1], now) then return {'lost'} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local out = {'ok'}
local msgs = redis.call('LPOP', KEYS[2], tonumber(ARGV[3]))
if msgs then
  for _, rid in ipairs(msgs) do
    local r = redis.call('HMGET', run_key(rid), 'epoch', 'abort', 'owner')
    if r[3] == ARGV[1] then
      out[#out + 1] = rid; out[#out + 1] = r[1] or '0'; out[#out + 1] = r[2] or ''
    end
  end
end
return out
"""

# A worker gives up its lease (graceful stop, or it found its lease lapsed), or the reconciler
# forgets a dead one: the lease ends now; the entry, runs set and inbox go once the set is empty
# (until then the entry stays, expired, so sweeps keep finding the runs).
# KEYS: workers, runs set, inbox   ARGV: lease id, only if expired ('1' = the reconciler's check)
FORGET_WORKER = r"""
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ARGV[2] == '1' and exp and tonumber(exp) > now_ms() then return {'alive'} end
if redis.call('SCARD', KEYS[2]) > 0 then
  if exp then redis.call('ZADD', KEYS[1], 0, ARGV[1]) end
  return {'has_runs'}
end
redis.call('DEL', KEYS[2], KEYS[3])
if not exp then return {'gone'} end
redis.call('ZREM', KEYS[1], ARGV[1])
return {'forgotten'}
"""

# Graceful hand-back: the worker stops at a checkpoint and the run goes straight back on the queue.
# KEYS: run, live, queue, new job key   ARGV: epoch, runId, newGen, newJobId, job, jobExpireMs, queuedCheckMs
RELEASE = r"""
local h = redis.call('HMGET', KEYS[1], 'epoch', 'status')
if not h[1] or tonumber(h[1]) ~= tonumber(ARGV[1]) then return {'fenced'} end
if is_terminal(h[2]) then return {'terminal'} end
local now = now_ms()
leave_worker(KEYS[1], ARGV[2])
redis.call('HSET', KEYS[1], 'owner', '', 'leaseUntil', 0, 'gen', ARGV[3], 'status', 'queued')
track(KEYS[1], ARGV[2], h[2], 'queued')
redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[2])
return {'released'}
"""

# The reconciler's per-run check of a run whose live-index deadline has passed, or (ARGV[10] = a
# worker lease id) of a run in the runs set of a worker whose lease expired.
# KEYS: run, live, queue, current job key, current job in-progress key, new job key, stream, tools
# ARGV: runId, expectedGen, currentJobId, newJobId, job, jobExpireMs, queuedCheckMs, maxlen, retention,
#       dead worker lease id ('' = from the live index)
REDISPATCH = r"""
local h = redis.call('HMGET', KEYS[1], 'status', 'gen', 'owner')
if ARGV[10] ~= '' and (h[3] ~= ARGV[10] or h[1] ~= 'running') then
  redis.call('SREM', worker_runs_key(ARGV[10]), ARGV[1])  -- no longer that worker's to carry
  return {'moved'}
end
if not h[1] then redis.call('ZREM', KEYS[2], ARGV[1]); return {'missing'} end
if is_terminal(h[1]) then redis.call('ZREM', KEYS[2], ARGV[1]); return {'terminal'} end
if tonumber(h[2]) ~= tonumber(ARGV[2]) then return {'moved'} end
local now = now_ms()
local reason = ''
if h[1] == 'running' then
  if worker_alive(h[3], now) then redis.call('ZREM', KEYS[2], ARGV[1]); return {'alive'} end
  redis.call('SREM', worker_runs_key(h[3]), ARGV[1])
  reason = 'lease_expired'
elseif h[1] == 'queued' then
  if redis.call('EXISTS', KEYS[5]) == 0 and redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[1])
    return {'waiting'}
  end
  reason = 'job_lost'
elseif h[1] == 'awaiting_human' then
  local code, message, due = approval_expired(KEYS[1], now)
  if code then
    finalize(KEYS[1], KEYS[7], KEYS[8], KEYS[2], ARGV[1], 'failed', code, message, ARGV[8], ARGV[9])
    return {code}
  end
  if due then  -- checked early (the sweeper's clock is not Redis's): keep the deadline watched
    redis.call('ZADD', KEYS[2], due, ARGV[1])
  else
    redis.call('ZREM', KEYS[2], ARGV[1])
  end
  return {'awaiting'}
elseif h[1] == 'awaiting_tools' then
  local open, earliest = client_settle(KEYS[1], KEYS[8], now)
  if open > 0 then
    redis.call('ZADD', KEYS[2], earliest, ARGV[1])
    return {'awaiting_tools'}
  end
  reason = 'client_tools_settled'
end
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[1], 'gen', tonumber(h[2]) + 1, 'status', 'queued')
track(KEYS[1], ARGV[1], h[1], 'queued')
redis.call('SET', KEYS[6], ARGV[5], 'PX', ARGV[6])
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[1])
return {'redispatched', reason}
"""

# KEYS: run, stream, tools, live   ARGV: runId, reason, maxlen, retention, tenant ('' = any)
ABORT = r"""
local h = redis.call('HMGET', KEYS[1], 'status', 'tenant')
if not h[1] then return {'unknown'} end
if ARGV[5] ~= '' and h[2] ~= ARGV[5] then return {'unknown'} end
if is_terminal(h[1]) then return {'finished', h[1]} end
if h[1] == 'queued' or h[1] == 'awaiting_human' or h[1] == 'awaiting_tools' then
  finalize(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], 'aborted', 'aborted', ARGV[2], ARGV[3], ARGV[4])
  return {'aborted', h[1]}
end
request_abort(ARGV[1], ARGV[2])
return {'requested', h[1]}
"""

# A decision past the approval timeout or the run's deadline comes too late: the run ends then and
# there (as the reconciler would end it) and the decision is refused like one for a finished run.
# KEYS: run, live, queue, new job key, stream, tools
# ARGV: runId, toolCallId, decision ('approved'|'rejected'), reason, expectedGen, newJobId, job,
#       jobExpireMs, queuedCheckMs, tenant ('' = any), maxlen, retention
SETTLE_APPROVAL = r"""
local h = redis.call('HMGET', KEYS[1], 'status', 'approvals', 'gen', 'tenant')
if not h[1] then return {'unknown_run'} end
if ARGV[10] ~= '' and h[4] ~= ARGV[10] then return {'unknown_run'} end
if h[1] ~= 'awaiting_human' then return {'not_awaiting', h[1]} end
if tonumber(h[3]) ~= tonumber(ARGV[5]) then return {'moved'} end
local code, message = approval_expired(KEYS[1], now_ms())
if code then
  finalize(KEYS[1], KEYS[5], KEYS[6], KEYS[2], ARGV[1], 'failed', code, message, ARGV[11], ARGV[12])
  return {'not_awaiting', 'failed'}
end
local approvals = cjson.decode(h[2])
local entry = approvals[ARGV[2]]
if entry == nil then return {'unknown_call'} end
if entry.decision ~= 'pending' then return {'already_decided', entry.decision} end
entry.decision = ARGV[3]
if ARGV[4] ~= '' then entry.reason = ARGV[4] end
local open = 0
for _, e in pairs(approvals) do if e.decision == 'pending' then open = open + 1 end end
redis.call('HSET', KEYS[1], 'approvals', cjson.encode(approvals))
if open > 0 then return {'recorded', tostring(open)} end
local now = now_ms()
redis.call('HSET', KEYS[1], 'gen', tonumber(h[3]) + 1, 'status', 'queued')
track(KEYS[1], ARGV[1], h[1], 'queued')
redis.call('SET', KEYS[4], ARGV[7], 'PX', ARGV[8])
redis.call('ZADD', KEYS[3], now, ARGV[6])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[9]), ARGV[1])
redis.call('ZREM', AWAITING, ARGV[1])
return {'resumed', '0'}
"""

# A caller's results for client tool calls, all or none: each must name a client call of the run;
# a repeat of a recorded result is a no-op, a different one a conflict. When the run is parked and
# this completes its calls, it goes back on the queue.
# KEYS: run, tools   ARGV: runId, tenant ('' = any), n, then toolCallId, content, isError ('1'|'') × n
TOOL_RESULTS = r"""
local h = redis.call('HMGET', KEYS[1], 'status', 'tenant')
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
  if finished and r.state ~= 'done' then return {'finished', h[1]} end
  if not r.client then return {'not_client', id} end
  local prev = nil
  if r.state == 'done' then
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
    new[id] = {state = 'done', client = true,
      result = {toolCallId = id, name = r.name, content = content, isError = is_err}}
    out[#out + 1] = 'recorded'
  end
end
for id, rec in pairs(new) do redis.call('HSET', KEYS[2], id, cjson.encode(rec)) end
if h[1] == 'awaiting_tools' then
  local open = client_settle(KEYS[1], KEYS[2], now)
  if open == 0 then
    client_resume(KEYS[1], ARGV[1], now)
    out[1] = 'resumed'
  end
end
return out
"""

# arq's job start, batched: claim up to ARGV[3] of the given job ids in one round trip, with arq's
# own rule (the job is due and nobody holds its in-progress key); a claimed job leaves the queue.
# KEYS: queue   ARGV: now, inProgressMs, limit, inProgressPrefix, ids...
CLAIM_JOBS = r"""
-- ARGV: now ms, in-progress ttl ms, most jobs to claim, in-progress key prefix, claim check ms,
--       default maxRunning per tenant (0: none), {tenant: maxRunning} JSON or '', push-back ms, job ids…
-- A claimed run's reconciler check moves to one lease from now: if its worker dies before it takes
-- the lease, the sweep finds the run still queued with its job in progress and re-dispatches it.
-- Fair dispatch: a job whose tenant already runs its maxRunning is not claimed; its score moves
-- push-back ms ahead, so the jobs of other tenants behind it come within arq's poll window.
local out = {}
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[3])
local check_ms = tonumber(ARGV[5])
local check_at = now + check_ms
local max_running = tonumber(ARGV[6])
local caps = {}
if ARGV[7] ~= '' then caps = cjson.decode(ARGV[7]) end
local push_to = now + tonumber(ARGV[8])
local counts = {}
-- Runs of the tenant still running (or claimed moments ago and not yet started); the set is
-- pruned, oldest claims first and at most 200 a call, only when it looks full.
local function running_count(t, cap)
  if counts[t] then return counts[t] end
  local key = tenant_running_key(t)
  local n = redis.call('ZCARD', key)
  if n >= cap then
    local members = redis.call('ZRANGE', key, 0, 199, 'WITHSCORES')
    for i = 1, #members, 2 do
      local st = redis.call('HGET', run_key(members[i]), 'status')
      if st ~= 'running' and not (st == 'queued' and tonumber(members[i + 1]) >= now - check_ms) then
        redis.call('ZREM', key, members[i])
      end
    end
    n = redis.call('ZCARD', key)
  end
  counts[t] = n
  return n
end
for i = 9, #ARGV do
  if #out >= 2 * limit then break end
  local id = ARGV[i]
  local rid = string.match(id, '^(.-)#%d+$') or id
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and tonumber(score) <= now then
    local tenant, cap = '', 0
    if max_running > 0 or ARGV[7] ~= '' then
      tenant = redis.call('HGET', run_key(rid), 'tenant') or ''
      cap = tonumber(caps[tenant] or max_running)
    end
    if cap > 0 and running_count(tenant, cap) >= cap then
      redis.call('ZADD', KEYS[1], 'XX', push_to, id)
    elseif redis.call('SET', ARGV[4] .. id, '1', 'NX', 'PX', ARGV[2]) then
      -- Claimed: off the queue, so later polls (every worker's, every 50 ms) do not scan it again
      -- while it runs. A lost claim is found by the reconciler (the run's live-index check), not
      -- by arq's in-progress expiry.
      redis.call('ZREM', KEYS[1], id)
      out[#out + 1] = id
      out[#out + 1] = score
      redis.call('ZADD', LIVE, 'XX', 'LT', check_at, rid)
      if cap > 0 then
        redis.call('ZADD', tenant_running_key(tenant), now, rid)
        counts[tenant] = counts[tenant] + 1
      end
    end
  end
end
return out
"""

# Tenant admission (maxActive and submitsPerSecond quotas) for runs about to be submitted.
# KEYS: the tenant's active zset, its rate counter of this second
# ARGV: now ms, maxActive (0: none), submitsPerSecond (0: none), active set ttl ms, grace ms, runIds…
# Returns {'ok'} | {'rate_limited', submitted this second} | {'full', active count}.
ADMIT_TENANT = r"""
local now = tonumber(ARGV[1])
local max_active = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local n = #ARGV - 5
if rate > 0 then
  local c = redis.call('INCRBY', KEYS[2], n)
  if c == n then redis.call('PEXPIRE', KEYS[2], 2000) end
  if c > rate then
    redis.call('DECRBY', KEYS[2], n)
    return {'rate_limited', c - n}
  end
end
if max_active > 0 then
  local new = 0
  for i = 6, #ARGV, 1000 do  -- ZMSCORE (Redis >= 6.2): one call per thousand runs, not one per run
    for _, sc in ipairs(redis.call('ZMSCORE', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))) do
      if not sc then new = new + 1 end
    end
  end
  local count = redis.call('ZCARD', KEYS[1])
  if count + new > max_active then
    -- Forget runs that ended (or expired): oldest first, at most 200 a call, so a full tenant
    -- costs Redis a bounded amount per refused submission.
    local members = redis.call('ZRANGE', KEYS[1], 0, 199, 'WITHSCORES')
    for i = 1, #members, 2 do
      local st = redis.call('HGET', run_key(members[i]), 'status')
      if (st and st ~= 'queued' and st ~= 'running')
          or (not st and tonumber(members[i + 1]) < now - tonumber(ARGV[5])) then
        redis.call('ZREM', KEYS[1], members[i])
      end
    end
    count = redis.call('ZCARD', KEYS[1])
  end
  if count + new > max_active then
    if rate > 0 then redis.call('DECRBY', KEYS[2], n) end
    return {'full', count}
  end
  local add = {}
  for i = 6, #ARGV do
    add[#add + 1] = now; add[#add + 1] = ARGV[i]
    if #add == 2000 or i == #ARGV then redis.call('ZADD', KEYS[1], 'NX', unpack(add)); add = {} end
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return {'ok', 0}
"""

# Webhook deliveries: move newly finished runs from the list the scripts push to into the due set,
# then claim due deliveries for a lease (so several API processes never deliver one at once).
# KEYS: webhook list, due zset   ARGV: now, leaseMs, limit
CLAIM_WEBHOOKS = r"""
for _ = 1, 1000 do
  local id = redis.call('RPOP', KEYS[1])
  if not id then break end
  redis.call('ZADD', KEYS[2], 'NX', ARGV[1], id)
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[2], tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
end
return ids
"""

# A page of a tenant's runs, newest first: walk the smallest of the filters' indexes and keep the
# runs that are in every other one. The cursor is the last (createdAt, runId) returned: the next page
# starts right after it (by its rank while it is still in the index, else by score), so runs
# inserted meanwhile never shift a page. Entries whose run has expired are dropped on the way.
# ARGV: tenant, limit, scanMax, cursorScore ('' = first page), cursorId, createdAfter ('' = none,
#   exclusive), createdBefore ('' = none, exclusive), nFilters, then dim, value pairs.
# Reply: nextCursorScore ('' = the end), nextCursorId, then per run: runId, status, createdAt,
#   sessionId, agent, batch, finishedAt, clientId (the id shown for a tenant-scoped run).
LIST_RUNS = r"""
local pre = tenant_prefix(ARGV[1]) .. ':ix:'
local limit, scan_max = tonumber(ARGV[2]), tonumber(ARGV[3])
local idx = {}
for j = 1, tonumber(ARGV[8]) do idx[#idx + 1] = pre .. ARGV[7 + 2 * j] .. ':' .. ARGV[8 + 2 * j] end
if #idx == 0 then idx = {pre .. 'all:'} end
local driver, best = 1, nil
for j, k in ipairs(idx) do
  local n = redis.call('ZCARD', k)
  if best == nil or n < best then driver, best = j, n end
end
local dkey = idx[driver]
local max = ARGV[7] ~= '' and ('(' .. ARGV[7]) or '+inf'
local min = ARGV[6] ~= '' and ('(' .. ARGV[6]) or '-inf'
local cs, cid = ARGV[4], ARGV[5]
local by_rank = nil
if cs ~= '' then
  if redis.call('ZSCORE', dkey, cid) == cs then
    by_rank = redis.call('ZREVRANK', dkey, cid) + 1
  elseif ARGV[7] == '' or tonumber(cs) < tonumber(ARGV[7]) then
    max = cs
  end
end
local out, dead = {'', ''}, {}
local after = ARGV[6] ~= '' and tonumber(ARGV[6]) or nil
local before = ARGV[7] ~= '' and tonumber(ARGV[7]) or nil
local scanned, offset, last_score, last_id, ended = 0, 0, nil, nil, false
local n = 0
while not ended and scanned < scan_max and n < limit do
  local page
  if by_rank then
    page = redis.call('ZREVRANGE', dkey, by_rank + offset, by_rank + offset + 99, 'WITHSCORES')
  else
    page = redis.call('ZREVRANGEBYSCORE', dkey, max, min, 'WITHSCORES', 'LIMIT', offset, 100)
  end
  if #page < 200 then ended = true end
  offset = offset + #page / 2
  for p = 1, #page, 2 do
    local id, score = page[p], page[p + 1]
    local s = tonumber(score)
    if after and s <= after then ended = true; break end
    local skip = (before and s >= before) or (not by_rank and cs ~= '' and score == cs and id >= cid)
    if not skip then
      scanned = scanned + 1
      last_score, last_id = score, id
      local ok = true
      for j, k in ipairs(idx) do
        if j ~= driver and not redis.call('ZSCORE', k, id) then ok = false; break end
      end
      if ok then
        local h = redis.call('HMGET', run_key(id), 'status', 'createdAt', 'sessionId', 'agent', 'batch',
          'finishedAt', 'clientId', 'tenant')
        if not h[1] or h[8] ~= ARGV[1] then
          dead[#dead + 1] = id
        else
          out[#out + 1] = id
          for f = 1, 7 do out[#out + 1] = h[f] or '' end
          n = n + 1
        end
      end
      if n >= limit or scanned >= scan_max then break end
    end
  end
end
if #dead > 0 then redis.call('ZREM', dkey, unpack(dead)) end
if last_id and (n >= limit or scanned >= scan_max) then out[1], out[2] = last_score, last_id end
return out
"""

# ---- pool-wide provider limits (worker/limiter.py); the keys of one endpoint share a hash tag ----

# KEYS slots, requests, tokens, pause; ARGV holder, leaseMs, maxConcurrent, rpm, tpm, tokens, windowMs
# (0 = no such limit). Returns {0, 'ok'} when granted, else {waitHintMs, reason}.
CAPACITY_ACQUIRE = r"""
local now = now_ms()
local holder = ARGV[1]
local lease, maxc, rpm = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tpm, tokens, window = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local paused = tonumber(redis.call('GET', KEYS[4]) or '0')
if paused > now then return {paused - now, 'paused'} end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= maxc then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {math.max(1, tonumber(first[2]) - now), 'concurrency'}
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if redis.call('ZCARD', KEYS[2]) >= rpm then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {math.max(1, tonumber(first[2]) + window - now), 'requests'}
  end
end
if tpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
  local entries = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  local used = 0
  for i = 1, #entries, 2 do used = used + tonumber(string.match(entries[i], ':(%d+)$')) end
  -- A request larger than the whole budget still goes, alone in an empty window.
  if used > 0 and used + tokens > tpm then
    local excess = used + tokens - tpm
    for i = 1, #entries, 2 do
      excess = excess - tonumber(string.match(entries[i], ':(%d+)$'))
      if excess <= 0 then return {math.max(1, tonumber(entries[i + 1]) + window - now), 'tokens'} end
    end
    return {window, 'tokens'}
  end
end
if maxc > 0 then
  redis.call('ZADD', KEYS[1], now + lease, holder)
  redis.call('PEXPIRE', KEYS[1], lease * 2)
end
if rpm > 0 then
  redis.call('ZADD', KEYS[2], now, holder)
  redis.call('PEXPIRE', KEYS[2], window * 2)
end
if tpm > 0 then
  redis.call('ZADD', KEYS[3], now, holder .. ':' .. tokens)
  redis.call('PEXPIRE', KEYS[3], window * 2)
end
return {0, 'ok'}
"""

# KEYS slots; ARGV holder, leaseMs. Extends a live call's slot (puts it back if it had expired).
CAPACITY_RENEW = r"""
redis.call('ZADD', KEYS[1], now_ms() + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
"""

# KEYS slots, tokens; ARGV holder, estimatedTokens, actualTokens (-1: keep the estimate).
CAPACITY_RELEASE = r"""
redis.call('ZREM', KEYS[1], ARGV[1])
local actual = tonumber(ARGV[3])
if actual >= 0 and ARGV[2] ~= ARGV[3] then
  local member = ARGV[1] .. ':' .. ARGV[2]
  local started = redis.call('ZSCORE', KEYS[2], member)
  if started then
    redis.call('ZREM', KEYS[2], member)
    redis.call('ZADD', KEYS[2], started, ARGV[1] .. ':' .. actual)
  end
end
return 1
"""

# KEYS pause; ARGV ms. No call to the endpoint starts for ms (an existing longer pause stays).
CAPACITY_PAUSE = r"""
local now = now_ms()
local ms = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current >= now + ms then return current - now end
redis.call('SET', KEYS[1], now + ms, 'PX', ms)
return ms
"""

_SOURCES = {
    "submit": SUBMIT,
    "submit_many": SUBMIT_MANY,
    "batch_close": BATCH_CLOSE,
    "list_runs": LIST_RUNS,
    "acquire": ACQUIRE,
    "commit": COMMIT,
    "beat": BEAT,
    "forget_worker": FORGET_WORKER,
    "release": RELEASE,
    "redispatch": REDISPATCH,
    "abort": ABORT,
    "settle_approval": SETTLE_APPROVAL,
    "tool_results": TOOL_RESULTS,
    "claim_jobs": CLAIM_JOBS,
    "claim_webhooks": CLAIM_WEBHOOKS,
    "capacity_acquire": CAPACITY_ACQUIRE,
    "capacity_renew": CAPACITY_RENEW,
    "capacity_release": CAPACITY_RELEASE,
    "capacity_pause": CAPACITY_PAUSE,
    "admit_tenant": ADMIT_TENANT,
}


class Scripts:
    """The scripts registered on one client; call as ``await scripts.commit(keys=…, args=…)``."""

    submit: AsyncScript
    submit_many: AsyncScript
    list_runs: AsyncScript
    acquire: AsyncScript
    commit: AsyncScript
    beat: AsyncScript
    forget_worker: AsyncScript
    release: AsyncScript
    redispatch: AsyncScript
    abort: AsyncScript
    settle_approval: AsyncScript
    batch_close: AsyncScript
    tool_results: AsyncScript
    claim_jobs: AsyncScript
    claim_webhooks: AsyncScript
    capacity_acquire: AsyncScript
    capacity_renew: AsyncScript
    capacity_release: AsyncScript
    capacity_pause: AsyncScript
    admit_tenant: AsyncScript

    def __init__(
        self,
        redis: Redis,
        *,
        queued_check_ms: int = 60_000,
        stream_maxlen: int = 10_000,
        retention_s: int = 604_800,
    ) -> None:
        from shared.dispatch import JOB_EXPIRE_MS, RUN_FUNCTION

        tokens = {
            "__WEBHOOKS__": keys.WEBHOOKS,
            "__QUEUE__": keys.QUEUE,
            "__LIVE__": keys.LIVE,
            "__AWAITING__": keys.AWAITING,
            "__WORKERS__": keys.WORKERS,
            "__PREFIX__": keys.PREFIX,
            "__JOBPREFIX__": keys.arq_job_key(""),
            "__FUNCTION__": RUN_FUNCTION,
            "__JOB_EXPIRE_MS__": str(JOB_EXPIRE_MS),
            "__QUEUED_CHECK_MS__": str(queued_check_ms),
            "__MAXLEN__": str(stream_maxlen),
            "__RETENTION__": str(retention_s),
            "__INDEX_MAX__": str(limits.MAX_INDEX_RUNS),
            "__BATCH_DELIVERY__": keys.BATCH_DELIVERY,
            "__TERMINAL__": ", ".join(f"{s.value}=true" for s in sorted(TERMINAL)),
        }
        for name, source in _rendered(tuple(tokens.items())).items():
            setattr(self, name, redis.register_script(source))


@functools.lru_cache(maxsize=16)
def _rendered(tokens: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Every script's source with the tokens filled in (once per distinct settings)."""
    out = {}
    for name, body in _SOURCES.items():
        source = PRELUDE + body
        for token, value in tokens:
            source = source.replace(token, value)
        out[name] = source
    return out


def text(value: Any) -> str:
    """Decode a script reply element (bytes from a client without decode_responses)."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)
