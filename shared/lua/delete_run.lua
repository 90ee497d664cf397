-- The call: shared.calls.erasure.DeleteRun (the session's keys only with a session).
-- Delete one run from its partition, all at once: its hash, stream, tool records, transcript,
-- webhook state, tool-result cache entries, job, every index and set naming it, its batch count, its
-- session's entries (turns, calls, results; the session itself with its last run). What remains is
-- its tombstone (ctx().gone): no script creates the run again while it is there (submit_one.lua), and
-- a worker still holding it is refused at its next write (no run hash: append_refused's 'missing').
-- Reply: {V.DELETED, its status, its sessionId} | {V.UNKNOWN} | {V.GONE, tombstone} (deleted before)
--   | {V.MOVED, sessionId} (not the session the caller read: read again)
--   | {V.FINISHING} (ended, its job still being finished: call again)
local id = ARG.RUN_ID
local h = redis.call('HMGET', KEY.RUN, F.STATUS, F.TENANT, F.SESSION_ID, F.AGENT, F.BATCH, F.GEN, F.OWNER,
  F.PARENT_RUN)
local gone = ctx().gone .. id
if not h[1] then
  local tomb = redis.call('GET', gone)
  if tomb then return {V.GONE, tomb} end
  return {V.UNKNOWN}
end
if ARG.TENANT ~= '' and h[2] ~= ARG.TENANT then return {V.UNKNOWN} end
local st, t, sid = h[1], h[2] or '', h[3] or ''
if sid ~= ARG.SESSION_ID then return {V.MOVED, sid} end
-- its job, wherever it waits
local jid = job_id(id, tonumber(h[6] or '1'))
-- An ended run whose job is still being finished: its worker writes arq's result record (and clears
-- the job's in-progress key after it) a moment after the ending. Deleted now, that record would land
-- after the deletion: the caller asks again once the job is finished (or, past its patience, not).
if tonumber(ARG.WAIT_JOB) == 1 and is_terminal(st) and redis.call('EXISTS', ctx().job_progress .. jid) == 1 then
  return {V.FINISHING}
end
if redis.call('ZREM', QUEUE, jid) == 1 or redis.call('ZREM', tenant_held_key(t), jid) == 1 then
  depth_down(run_priority(id))
end
redis.call('ZREM', SCHEDULED, jid)
for g = 1, tonumber(h[6] or '1') do  -- arq's keys of every dispatch of it
  local j = job_id(id, g)
  redis.call('DEL', ctx().job_key .. j, ctx().job_result .. j, ctx().job_progress .. j)
end
if (h[7] or '') ~= '' then redis.call('SREM', worker_runs_key(h[7]), id) end
for _, k in ipairs({LIVE, AWAITING, ctx().archive, KEY.WEBHOOKS_DUE, ctx().tenant_active .. t}) do redis.call('ZREM', k, id) end
redis.call('LREM', WEBHOOKS, 0, id)
if redis.call('ZREM', tenant_running_key(t), id) == 1 then unhold(t, 1) end
-- its listing indexes
redis.call('ZREM', index_key(t, DIM.ALL, ''), id)
redis.call('ZREM', index_key(t, DIM.STATUS, st), id)
if (h[4] or '') ~= '' then redis.call('ZREM', index_key(t, DIM.AGENT, h[4]), id) end
if sid ~= '' then redis.call('ZREM', index_key(t, DIM.SESSION, sid), id) end
if (h[8] or '') ~= '' then redis.call('ZREM', index_key(t, DIM.PARENT, h[8]), id) end
for j = 1, tonumber(ARG.N_TERMS) do redis.call('ZREM', index_key(t, DIM.META, ARGV[ARGN.TERMS + j - 1]), id) end
-- its batch: one run fewer (a batch whose other runs all ended is finished now)
local batch = h[5] or ''
if batch ~= '' then
  redis.call('ZREM', index_key(t, DIM.BATCH, batch), id)
  redis.call('ZREM', index_key(t, DIM.ITEM, batch), id)
  local bk = batch_key(t, batch)
  if redis.call('EXISTS', bk) == 1 then
    redis.call('HINCRBY', bk, st, -1)
    redis.call('HINCRBY', bk, BATCH.TOTAL, -1)
    if is_terminal(st) then redis.call('HINCRBY', bk, BATCH.DONE, -1) else batch_settle(bk) end
  end
end
-- its session's entries: its turn, its calls and their results; the session goes with its last run
if sid ~= '' then
  redis.call('LREM', KEY.SESSION_PENDING, 0, id)
  redis.call('LREM', KEY.SESSION_RUNS, 0, id)
  local mark = '"runId":"' .. id .. '"'
  for _, lk in ipairs({KEY.SESSION_LOOPS, KEY.SESSION_CALLS}) do
    for _, e in ipairs(redis.call('LRANGE', lk, 0, -1)) do
      if string.find(e, mark, 1, true) then redis.call('LREM', lk, 0, e) end
    end
  end
  local pre, drop = id .. '/', {}
  for _, f in ipairs(redis.call('HKEYS', KEY.SESSION_RESULTS)) do
    if string.sub(f, 1, #pre) == pre then drop[#drop + 1] = f end
  end
  for k = 1, #drop, 1000 do redis.call('HDEL', KEY.SESSION_RESULTS, unpack(drop, k, math.min(k + 999, #drop))) end
  if redis.call('HGET', KEY.SESSION, SESSION.ACTIVE_RUN) == id then session_advance(sid, id) end
  if redis.call('LLEN', KEY.SESSION_RUNS) == 0 then
    redis.call('DEL', KEY.SESSION, KEY.SESSION_PENDING, KEY.SESSION_LOOPS, KEY.SESSION_RESULTS, KEY.SESSION_CALLS)
  end
end
-- the tool-result cache entries it wrote
local cached = ctx().run_cached .. id
for _, k in ipairs(redis.call('SMEMBERS', cached)) do redis.call('DEL', k) end
redis.call('DEL', KEY.RUN, KEY.STREAM, KEY.TOOLS, KEY.TREE, transcript_key(id), ctx().webhook .. id, cached)
redis.call('SET', gone, ARG.TOMBSTONE, 'EX', tonumber(ARG.TOMBSTONE_TTL_S))
return {V.DELETED, st, sid}
