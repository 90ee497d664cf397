"""Every multi-key Redis change, as a Lua script registered once per client.

The run hash (keys.run_key) is the source of truth: ``status``, ``gen`` (dispatch number, one arq
job each), ``epoch`` (fencing token, taken by every job start), ``owner``/``leaseUntil`` (who runs
it, until when), ``lastSeq`` (the stream's last seq), ``ckpt`` (the machine state), ``result``.

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

from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from shared import keys

PRELUDE = r"""
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local WEBHOOKS = '__WEBHOOKS__'
local QUEUE = '__QUEUE__'
local LIVE = '__LIVE__'
local AWAITING = '__AWAITING__'
local function run_key(id) return '__PREFIX__:{' .. id .. '}:run' end
local function stream_key(id) return '__PREFIX__:{' .. id .. '}:events' end
local function tools_key(id) return '__PREFIX__:{' .. id .. '}:tools' end
local function session_key(sid) return '__PREFIX__:s:{' .. sid .. '}' end
local function is_terminal(s)
  return s == 'completed' or s == 'failed' or s == 'aborted'
end
local function xadd(stream, seq, kind, ts, payload, maxlen, epoch)
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, seq .. '-0',
    'seq', seq, 'kind', kind, 'ts', ts, 'payload', payload, 'epoch', epoch)
end
-- Put dispatch 1 of a run on arq's queue (the JSON arq's worker reads with our serializer).
local function enqueue_first(id, now)
  redis.call('SET', '__JOBPREFIX__' .. id,
    cjson.encode({t = cjson.null, f = '__FUNCTION__', a = {id, 1}, k = {}, et = now}), 'PX', __JOB_EXPIRE_MS__)
  redis.call('ZADD', QUEUE, now, id)
  redis.call('ZADD', LIVE, now + __QUEUED_CHECK_MS__, id)
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
  local h = redis.call('HMGET', run, 'lastSeq', 'sessionId', 'ckpt', 'epoch')
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
  xadd(stream, seq, 'status', ts, cjson.encode({status = status, iterations = iterations, error = err}), maxlen,
    tonumber(h[4] or '0') + 1)
  redis.call('HSET', run, 'status', status, 'result', cjson.encode(result), 'lastSeq', seq,
    'owner', '', 'leaseUntil', 0, 'epoch', tonumber(h[4] or '0') + 1, 'finishedAt', ts, 'abort', '')
  redis.call('ZREM', live, run_id)
  redis.call('ZREM', AWAITING, run_id)
  local wh = redis.call('HGET', run, 'webhook')
  if wh and wh ~= '' then redis.call('LPUSH', WEBHOOKS, run_id) end
  session_advance(h[2], run_id)
  redis.call('EXPIRE', run, retention)
  redis.call('EXPIRE', stream, retention)
  redis.call('EXPIRE', tools, retention)
  return seq
end
"""

# KEYS: run, arq job key, arq queue, live, session, session pending, session runs
# ARGV: runId, input, inputHash, tenant, sessionId, job payload, jobExpireMs, queuedCheckMs, webhook,
#       autoCreateSession ('1' or ''), multitaskStrategy (enqueue | reject | interrupt)
SUBMIT = r"""
if redis.call('EXISTS', KEYS[1]) == 1 then
  local h = redis.call('HMGET', KEYS[1], 'inputHash', 'status', 'tenant')
  if h[3] ~= ARGV[4] then return {'conflict', ''} end
  if h[1] == ARGV[3] then return {'exists', h[2]} end
  return {'conflict', h[2]}
end
local now = now_ms()
local dispatch = true
if ARGV[5] ~= '' then
  local s = redis.call('HMGET', KEYS[5], 'tenant', 'activeRun')
  if not s[1] then
    if ARGV[10] ~= '1' then return {'unknown_session', ''} end
    redis.call('HSET', KEYS[5], 'tenant', ARGV[4], 'createdAt', now, 'activeRun', '')
    s = {ARGV[4], ''}
  elseif s[1] ~= ARGV[4] then
    return {'unknown_session', ''}
  end
  local active = s[2]
  if active and active ~= '' then
    local st = redis.call('HGET', run_key(active), 'status')
    if st and not is_terminal(st) then
      if ARGV[11] == 'reject' then return {'session_busy', active} end
      dispatch = false
      if ARGV[11] == 'interrupt' then
        local why = 'interrupted by run ' .. ARGV[1]
        for _, pid in ipairs(redis.call('LRANGE', KEYS[6], 0, -1)) do
          if redis.call('HGET', run_key(pid), 'status') == 'queued' then
            finalize(run_key(pid), stream_key(pid), tools_key(pid), LIVE, pid, 'aborted', 'aborted', why,
              __MAXLEN__, __RETENTION__)
          end
        end
        redis.call('DEL', KEYS[6])
        if st == 'running' then
          redis.call('HSET', run_key(active), 'abort', why)
        else
          finalize(run_key(active), stream_key(active), tools_key(active), LIVE, active, 'aborted', 'aborted', why,
            __MAXLEN__, __RETENTION__)
          dispatch = true
        end
      end
    end
  end
  redis.call('RPUSH', KEYS[7], ARGV[1])
  if dispatch then
    redis.call('HSET', KEYS[5], 'activeRun', ARGV[1])
  else
    redis.call('RPUSH', KEYS[6], ARGV[1])
  end
end
redis.call('HSET', KEYS[1], 'status', 'queued', 'input', ARGV[2], 'inputHash', ARGV[3],
  'tenant', ARGV[4], 'sessionId', ARGV[5], 'createdAt', now, 'gen', 1, 'epoch', 0, 'lastSeq', 0,
  'owner', '', 'leaseUntil', 0, 'restarts', 0, 'webhook', ARGV[9], 'abort', '', 'held', dispatch and '' or '1')
if dispatch then
  redis.call('SET', KEYS[2], ARGV[6], 'PX', ARGV[7])
  redis.call('ZADD', KEYS[3], now, ARGV[1])
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[8]), ARGV[1])
end
return {'created', 'queued'}
"""

# KEYS: run, stream, tools, live
# ARGV: runId, gen, workerId, leaseMs, maxRestarts, maxlen, retention
ACQUIRE = r"""
local h = redis.call('HMGET', KEYS[1], 'status', 'gen', 'owner', 'leaseUntil', 'epoch', 'restarts')
if not h[1] then return {'missing'} end
if is_terminal(h[1]) then return {'terminal', h[1]} end
if tonumber(h[2]) ~= tonumber(ARGV[2]) then return {'superseded', h[2]} end
local now = now_ms()
if h[3] ~= '' and tonumber(h[4]) > now then return {'busy', h[3]} end
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
local lease = now + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'epoch', epoch, 'owner', ARGV[3], 'leaseUntil', lease,
  'restarts', restarts, 'status', 'running')
redis.call('ZADD', KEYS[4], lease, ARGV[1])
local d = redis.call('HMGET', KEYS[1], 'lastSeq', 'ckpt', 'input', 'abort', 'approvals')
return {'ok', tostring(epoch), d[1] or '0', d[2] or '', d[3] or '', d[4] or '', d[5] or '',
  redis.call('HGETALL', KEYS[3]), tostring(restarts)}
"""

# KEYS: run, stream, tools, live
# ARGV: [1] epoch [2] firstSeq [3] maxlen [4] retention [5] leaseMs [6] runId [7] status ('' = still
#   running) [8] aux (result JSON when terminal, approvals JSON when awaiting_human) [9] ckpt ('' =
#   unchanged) [10] nEvents, then kind, ts, payload per event; nClaims, ids; nRecords, id, json;
#   sessionId, run loop JSON ('' = none), nToolResults, id, json; approvalTimeoutMs ('' = none).
COMMIT = r"""
local h = redis.call('HMGET', KEYS[1], 'epoch', 'lastSeq')
if not h[1] then return {'missing'} end
if tonumber(h[1]) ~= tonumber(ARGV[1]) then return {'fenced', h[1]} end
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
if n > 0 then redis.call('HSET', KEYS[1], 'lastSeq', last) end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'ckpt', ARGV[9]) end
local status = ARGV[7]
local now = now_ms()
if status == '' then
  local lease = now + tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], 'leaseUntil', lease)
  redis.call('ZADD', KEYS[4], lease, ARGV[6])
elseif is_terminal(status) then
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
  redis.call('HSET', KEYS[1], 'status', status, 'approvals', ARGV[8], 'owner', '', 'leaseUntil', 0,
    'awaitingSince', now, 'approvalTimeoutMs', approval_timeout)
  redis.call('ZADD', AWAITING, now, ARGV[6])
  if approval_timeout ~= '' then
    redis.call('ZADD', KEYS[4], now + tonumber(approval_timeout), ARGV[6])
  else
    redis.call('ZREM', KEYS[4], ARGV[6])
  end
end
return {'ok', tostring(last)}
"""

# KEYS: run, live   ARGV: epoch, leaseMs, runId
RENEW = r"""
local h = redis.call('HMGET', KEYS[1], 'epoch', 'abort', 'status')
if not h[1] or tonumber(h[1]) ~= tonumber(ARGV[1]) then return {'fenced', ''} end
if h[3] ~= 'running' then return {'done', ''} end
local lease = now_ms() + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'leaseUntil', lease)
redis.call('ZADD', KEYS[2], lease, ARGV[3])
return {'ok', h[2] or ''}
"""

# Graceful hand-back: the worker stops at a checkpoint and the run goes straight back on the queue.
# KEYS: run, live, queue, new job key   ARGV: epoch, runId, newGen, newJobId, job, jobExpireMs, queuedCheckMs
RELEASE = r"""
local h = redis.call('HMGET', KEYS[1], 'epoch', 'status')
if not h[1] or tonumber(h[1]) ~= tonumber(ARGV[1]) then return {'fenced'} end
if is_terminal(h[2]) then return {'terminal'} end
local now = now_ms()
redis.call('HSET', KEYS[1], 'owner', '', 'leaseUntil', 0, 'gen', ARGV[3], 'status', 'queued')
redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[2])
return {'released'}
"""

# The reconciler's per-run check of a run whose live-index deadline has passed.
# KEYS: run, live, queue, current job key, current job in-progress key, new job key, stream, tools
# ARGV: runId, expectedGen, currentJobId, newJobId, job, jobExpireMs, queuedCheckMs, maxlen, retention
REDISPATCH = r"""
local h = redis.call('HMGET', KEYS[1], 'status', 'gen', 'leaseUntil', 'awaitingSince', 'approvalTimeoutMs')
if not h[1] then redis.call('ZREM', KEYS[2], ARGV[1]); return {'missing'} end
if is_terminal(h[1]) then redis.call('ZREM', KEYS[2], ARGV[1]); return {'terminal'} end
if tonumber(h[2]) ~= tonumber(ARGV[2]) then return {'moved'} end
local now = now_ms()
local reason = ''
if h[1] == 'running' then
  if tonumber(h[3]) > now then redis.call('ZADD', KEYS[2], h[3], ARGV[1]); return {'alive'} end
  reason = 'lease_expired'
elseif h[1] == 'queued' then
  if redis.call('EXISTS', KEYS[5]) == 0 and redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[1])
    return {'waiting'}
  end
  reason = 'job_lost'
elseif h[1] == 'awaiting_human' then
  local timeout = tonumber(h[5] or '0') or 0
  if timeout > 0 and now >= tonumber(h[4] or '0') + timeout then
    finalize(KEYS[1], KEYS[7], KEYS[8], KEYS[2], ARGV[1], 'failed', 'approval_timeout',
      'no approval decision within ' .. timeout .. ' ms', ARGV[8], ARGV[9])
    return {'approval_timeout'}
  end
  redis.call('ZREM', KEYS[2], ARGV[1])
  return {'awaiting'}
end
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[1], 'gen', tonumber(h[2]) + 1, 'status', 'queued')
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
if h[1] == 'queued' or h[1] == 'awaiting_human' then
  finalize(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], 'aborted', 'aborted', ARGV[2], ARGV[3], ARGV[4])
  return {'aborted', h[1]}
end
redis.call('HSET', KEYS[1], 'abort', ARGV[2])
return {'requested', h[1]}
"""

# KEYS: run, live, queue, new job key
# ARGV: runId, toolCallId, decision ('approved'|'rejected'), reason, expectedGen, newJobId, job,
#       jobExpireMs, queuedCheckMs, tenant ('' = any)
DECIDE = r"""
local h = redis.call('HMGET', KEYS[1], 'status', 'approvals', 'gen', 'tenant')
if not h[1] then return {'unknown_run'} end
if ARGV[10] ~= '' and h[4] ~= ARGV[10] then return {'unknown_run'} end
if h[1] ~= 'awaiting_human' then return {'not_awaiting', h[1]} end
if tonumber(h[3]) ~= tonumber(ARGV[5]) then return {'moved'} end
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
redis.call('SET', KEYS[4], ARGV[7], 'PX', ARGV[8])
redis.call('ZADD', KEYS[3], now, ARGV[6])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[9]), ARGV[1])
redis.call('ZREM', AWAITING, ARGV[1])
return {'resumed', '0'}
"""

# arq's job start, batched: claim up to ARGV[3] of the given job ids in one round trip, with arq's
# own rule (the job is due and nobody holds its in-progress key).
# KEYS: queue   ARGV: now, inProgressMs, limit, inProgressPrefix, ids...
CLAIM_JOBS = r"""
-- ARGV: now ms, in-progress ttl ms, most jobs to claim, in-progress key prefix, claim check ms, job ids…
-- A claimed run's reconciler check moves to one lease from now: if its worker dies before it takes
-- the lease, the sweep finds the run still queued with its job in progress and re-dispatches it.
local out = {}
local limit = tonumber(ARGV[3])
local check_at = tonumber(ARGV[1]) + tonumber(ARGV[5])
for i = 6, #ARGV do
  if #out >= 2 * limit then break end
  local id = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and tonumber(score) <= tonumber(ARGV[1]) then
    if redis.call('SET', ARGV[4] .. id, '1', 'NX', 'PX', ARGV[2]) then
      out[#out + 1] = id
      out[#out + 1] = score
      redis.call('ZADD', LIVE, 'XX', 'LT', check_at, string.match(id, '^(.-)#%d+$') or id)
    end
  end
end
return out
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

_SOURCES = {
    "submit": SUBMIT,
    "acquire": ACQUIRE,
    "commit": COMMIT,
    "renew": RENEW,
    "release": RELEASE,
    "redispatch": REDISPATCH,
    "abort": ABORT,
    "decide": DECIDE,
    "claim_jobs": CLAIM_JOBS,
    "claim_webhooks": CLAIM_WEBHOOKS,
}


class Scripts:
    """The scripts registered on one client; call as ``await scripts.commit(keys=…, args=…)``."""

    submit: AsyncScript
    acquire: AsyncScript
    commit: AsyncScript
    renew: AsyncScript
    release: AsyncScript
    redispatch: AsyncScript
    abort: AsyncScript
    decide: AsyncScript
    claim_jobs: AsyncScript
    claim_webhooks: AsyncScript

    def __init__(
        self,
        redis: Redis,
        *,
        queued_check_ms: int = 60_000,
        stream_maxlen: int = 10_000,
        retention_s: int = 604_800,
    ) -> None:
        from shared.dispatch import JOB_EXPIRE_MS, RUN_FUNCTION

        prelude = PRELUDE
        for token, value in {
            "__WEBHOOKS__": keys.WEBHOOKS,
            "__QUEUE__": keys.QUEUE,
            "__LIVE__": keys.LIVE,
            "__AWAITING__": keys.AWAITING,
            "__PREFIX__": keys.PREFIX,
            "__JOBPREFIX__": keys.arq_job_key(""),
            "__FUNCTION__": RUN_FUNCTION,
            "__JOB_EXPIRE_MS__": str(JOB_EXPIRE_MS),
            "__QUEUED_CHECK_MS__": str(queued_check_ms),
            "__MAXLEN__": str(stream_maxlen),
            "__RETENTION__": str(retention_s),
        }.items():
            prelude = prelude.replace(token, value)
        for name, body in _SOURCES.items():
            setattr(self, name, redis.register_script(prelude + body))


def text(value: Any) -> str:
    """Decode a script reply element (bytes from a client without decode_responses)."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)
