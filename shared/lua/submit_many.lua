-- Many runs of one tenant in one call (the batch path): the keys are derived here, not passed, and
-- the runs' small fields travel as one JSON array (a few arguments instead of a dozen per run).
-- ARGV: tenant, batchId ('' = none), batch webhook ('' = none), jobExpireMs, queuedCheckMs,
--   runs JSON [[runId, inputHash, sessionId, webhook, autoCreateSession, multitaskStrategy, agent,
--   [metadata 'key=value' terms]], …], then each run's input.   Reply: verdict, status per run.
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
