-- Many runs of one tenant in one partition in one call (the batch path): the runs' keys come from
-- the context, and their small fields travel as one JSON array (a few arguments, not a dozen a run).
-- KEYS: none of its own
-- ARGV: tenant, batchId ('' = none), batch webhook ('' = none), runs JSON [[runId, inputHash,
--   sessionId, webhook, autoCreateSession, multitaskStrategy, agent, [metadata 'key=value' terms],
--   clientId, clientSession, item index, priority, runAt, trace context, concurrency key, its
--   limit, debounce key, its period ms, why it waits, agent version], …], then each run's input.   Reply: verdict, status per run.
local t, batch = ARGV[1], ARGV[2]
local runs = cjson.decode(ARGV[4])
local out = {}
DEFERRED, TRIM, BATCH_NEW = {}, {}, {}
local now = now_ms()
FIXED_NOW = now
if batch ~= '' and redis.call('EXISTS', batch_key(t, batch)) == 1 and not batch_finished(t, batch) then
  redis.call('HSET', batch_key(t, batch), BATCH.OPEN, '1')  -- a run this call ends must not finish it
end
local c = ctx()
for n, r in ipairs(runs) do
  local id, sid, terms = r[1], r[3], r[8]
  local A = {id, ARGV[4 + n], r[2], t, sid, r[4], r[5], r[6], batch, r[7], #terms}
  for j = 1, #terms do A[11 + j] = terms[j] end
  A[12 + #terms] = r[9] or ''
  A[13 + #terms] = r[10] or ''
  A[14 + #terms] = r[11] or ''
  A[15 + #terms] = r[12] or ''
  A[16 + #terms] = r[13] or ''
  A[17 + #terms] = r[14] or ''
  A[18 + #terms] = r[15] or ''
  A[19 + #terms] = r[16] or ''
  A[20 + #terms] = r[17] or ''
  A[21 + #terms] = r[18] or ''
  A[22 + #terms] = r[19] or ''
  A[23 + #terms] = r[20] or ''
  local K = {run_key(id), c.job_key .. job_id(id, 1)}
  if sid ~= '' then
    K[3], K[4], K[5] = session_key(sid), c.session_pending .. sid, c.session_runs .. sid
  end
  local v = submit_one(K, A)
  out[#out + 1] = v[1]; out[#out + 1] = v[2]
end
flush_deferred()
if batch ~= '' and redis.call('EXISTS', batch_key(t, batch)) == 1 and not batch_finished(t, batch) then
  -- open until the request ends: its last chunk may not be here yet (BATCH_CLOSE closes it)
  redis.call('HSET', batch_key(t, batch), BATCH.OPEN, '1')
  if ARGV[3] ~= '' then redis.call('HSET', batch_key(t, batch), BATCH.WEBHOOK, ARGV[3]) end
end
return out
