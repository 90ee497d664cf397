-- A decision past the approval timeout or the run's deadline comes too late: the run ends then and
-- there (as the reconciler would end it) and the decision is refused like one for a finished run.
-- KEYS: run, live, queue, new job key, stream, tools
-- ARGV: runId, toolCallId, decision ('approved'|'rejected'), reason, expectedGen, newJobId, job,
--       jobExpireMs, queuedCheckMs, tenant ('' = any), maxlen, retention
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
