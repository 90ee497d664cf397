-- KEYS: run, stream, tools, the partition's webhooks due set, the run's tree (a root's), then with a
--   session: the session's hash, pending, runs, loops, results, calls (keys.Partition.session_keys)
-- ARGV: runId, tenant ('' = any), tombstone JSON, tombstone ttl s, the sessionId the caller read
--   ('' = none), nTerms, then its metadata's listing terms (shared.meta_terms)
-- Delete one run from its partition, all at once: its hash, stream, tool records, transcript,
-- webhook state, tool-result cache entries, job, every index and set naming it, its batch count, its
-- session's entries (turns, calls, results; the session itself with its last run). What remains is
-- its tombstone (ctx().gone): no script creates the run again while it is there (submit_one.lua), and
-- a worker still holding it is refused at its next write (no run hash: append_refused's 'missing').
-- Reply: {'deleted', its status, its sessionId} | {'unknown'} | {'gone', tombstone} (deleted before)
--   | {'moved', sessionId} (not the session the caller read: read again)
local id = ARGV[1]
local h = redis.call('HMGET', KEYS[1], F.STATUS, F.TENANT, F.SESSION_ID, F.AGENT, F.BATCH, F.GEN, F.OWNER,
  F.PARENT_RUN)
local gone = ctx().gone .. id
if not h[1] then
  local tomb = redis.call('GET', gone)
  if tomb then return {'gone', tomb} end
  return {'unknown'}
end
if ARGV[2] ~= '' and h[2] ~= ARGV[2] then return {'unknown'} end
local st, t, sid = h[1], h[2] or '', h[3] or ''
if sid ~= ARGV[5] then return {'moved', sid} end
-- its job, wherever it waits
local jid = job_id(id, tonumber(h[6] or '1'))
if redis.call('ZREM', QUEUE, jid) == 1 or redis.call('ZREM', tenant_held_key(t), jid) == 1 then
  depth_down(run_priority(id))
end
redis.call('ZREM', SCHEDULED, jid)
for g = 1, tonumber(h[6] or '1') do  -- arq's keys of every dispatch of it
  local j = job_id(id, g)
  redis.call('DEL', ctx().job_key .. j, ctx().job_result .. j, ctx().job_progress .. j)
end
if (h[7] or '') ~= '' then redis.call('SREM', worker_runs_key(h[7]), id) end
for _, k in ipairs({LIVE, AWAITING, ctx().archive, KEYS[4], ctx().tenant_active .. t}) do redis.call('ZREM', k, id) end
redis.call('LREM', WEBHOOKS, 0, id)
if redis.call('ZREM', tenant_running_key(t), id) == 1 then unhold(t, 1) end
-- its listing indexes
redis.call('ZREM', index_key(t, DIM.ALL, ''), id)
redis.call('ZREM', index_key(t, DIM.STATUS, st), id)
if (h[4] or '') ~= '' then redis.call('ZREM', index_key(t, DIM.AGENT, h[4]), id) end
if sid ~= '' then redis.call('ZREM', index_key(t, DIM.SESSION, sid), id) end
if (h[8] or '') ~= '' then redis.call('ZREM', index_key(t, DIM.PARENT, h[8]), id) end
for j = 1, tonumber(ARGV[6]) do redis.call('ZREM', index_key(t, DIM.META, ARGV[6 + j]), id) end
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
  redis.call('LREM', KEYS[7], 0, id)
  redis.call('LREM', KEYS[8], 0, id)
  local mark = '"runId":"' .. id .. '"'
  for _, lk in ipairs({KEYS[9], KEYS[11]}) do
    for _, e in ipairs(redis.call('LRANGE', lk, 0, -1)) do
      if string.find(e, mark, 1, true) then redis.call('LREM', lk, 0, e) end
    end
  end
  local pre, drop = id .. '/', {}
  for _, f in ipairs(redis.call('HKEYS', KEYS[10])) do
    if string.sub(f, 1, #pre) == pre then drop[#drop + 1] = f end
  end
  for k = 1, #drop, 1000 do redis.call('HDEL', KEYS[10], unpack(drop, k, math.min(k + 999, #drop))) end
  if redis.call('HGET', KEYS[6], SESSION.ACTIVE_RUN) == id then session_advance(sid, id) end
  if redis.call('LLEN', KEYS[8]) == 0 then redis.call('DEL', KEYS[6], KEYS[7], KEYS[9], KEYS[10], KEYS[11]) end
end
-- the tool-result cache entries it wrote
local cached = ctx().run_cached .. id
for _, k in ipairs(redis.call('SMEMBERS', cached)) do redis.call('DEL', k) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[5], transcript_key(id), ctx().webhook .. id, cached)
redis.call('SET', gone, ARGV[3], 'EX', tonumber(ARGV[4]))
return {'deleted', st, sid}
