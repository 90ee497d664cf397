-- A decision past the approval timeout or the run's deadline comes too late: the run ends then and
-- there (as the reconciler would end it) and the decision is refused like one for a finished run.
-- KEYS: run, stream, tools, next job key
-- ARGV: runId, toolCallId, decision ('approved'|'rejected'), reason, expectedGen, tenant ('' = any)
local h = redis.call('HMGET', KEYS[1], F.STATUS, F.APPROVALS, F.GEN, F.TENANT)
if not h[1] then return {'unknown_run'} end
if ARGV[6] ~= '' and h[4] ~= ARGV[6] then return {'unknown_run'} end
if h[1] ~= S.AWAITING_HUMAN then return {'not_awaiting', h[1]} end
if tonumber(h[3]) ~= tonumber(ARGV[5]) then return {'moved'} end
local code, message = approval_expired(KEYS[1], now_ms())
if code then
  finalize(KEYS[1], KEYS[2], KEYS[3], ARGV[1], S.FAILED, code, message)
  return {'not_awaiting', S.FAILED}
end
local approvals = cjson.decode(h[2])
local entry = approvals[ARGV[2]]
if entry == nil then return {'unknown_call'} end
if entry.decision ~= 'pending' then return {'already_decided', entry.decision} end
entry.decision = ARGV[3]
if ARGV[4] ~= '' then entry.reason = ARGV[4] end
local open = 0
for _, e in pairs(approvals) do if e.decision == 'pending' then open = open + 1 end end
redis.call('HSET', KEYS[1], F.APPROVALS, cjson.encode(approvals))
if open > 0 then return {'recorded', tostring(open)} end
local gen = tonumber(h[3]) + 1
redis.call('HSET', KEYS[1], F.GEN, gen, F.STATUS, S.QUEUED)
track(KEYS[1], ARGV[1], h[1], S.QUEUED)
enqueue_gen(ARGV[1], gen, now_ms(), KEYS[4])
redis.call('ZREM', AWAITING, ARGV[1])
return {'resumed', '0'}
