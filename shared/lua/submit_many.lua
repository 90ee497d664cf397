-- Many runs of one tenant in one partition in one call (the batch path): the runs' keys come from
-- the context, and their records travel as one JSON array (submit_one's A, each with its input ''),
-- their inputs after it.
local t, batch = ARG.TENANT, ARG.BATCH_ID
local runs = cjson.decode(ARG.RUNS)
local out = {}
DEFERRED, TRIM, BATCH_NEW = {}, {}, {}
local now = now_ms()
FIXED_NOW = now
if batch ~= '' and redis.call('EXISTS', batch_key(t, batch)) == 1 and not batch_finished(t, batch) then
  redis.call('HSET', batch_key(t, batch), BATCH.OPEN, '1')  -- a run this call ends must not finish it
end
local c = ctx()
for n, A in ipairs(runs) do
  local id, sid = A[NEW.RUN_ID], A[NEW.SESSION_ID]
  A[NEW.INPUT] = ARGV[ARGN.INPUTS + n - 1]
  local K = {run_key(id), c.job_key .. job_id(id, 1)}  -- Submit.KEY_NAMES (a session's three with one)
  if sid ~= '' then
    K = {K[1], K[2], session_key(sid), c.session_pending .. sid, c.session_runs .. sid}
  end
  local v = submit_one(K, A)
  out[#out + 1] = v[1]; out[#out + 1] = v[2]
end
flush_deferred()
if batch ~= '' and redis.call('EXISTS', batch_key(t, batch)) == 1 and not batch_finished(t, batch) then
  -- open until the request ends: its last chunk may not be here yet (BATCH_CLOSE closes it)
  redis.call('HSET', batch_key(t, batch), BATCH.OPEN, '1')
  if ARG.BATCH_WEBHOOK ~= '' then redis.call('HSET', batch_key(t, batch), BATCH.WEBHOOK, ARG.BATCH_WEBHOOK) end
end
return out
