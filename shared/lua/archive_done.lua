-- Runs an archiver has committed to PostgreSQL: out of the archive index, out of their tenant's
-- listing indexes (the listings read them from the archive now) and active set, marked archived, their stream and
-- tool records dropped (the archive serves them), the run hash kept without its input, checkpoint
-- and the fields only a live run needs for the live retention, then expiring.
-- The call: shared.calls.erasure.ArchiveDone (run keys from the context; the archive index is the
-- context's archive).
-- Reply: how many were still waiting in the index, then the runs deleted meanwhile (a tombstone:
-- the archiver deletes the rows it just wrote; the deletion deletes any written before its tombstone)
local live = tonumber(ARG.LIVE_RETENTION_S)
local n = 0
local deleted = {}
local k = ARGN.RUNS
while k <= #ARGV do
  local id, nterms = ARGV[k], tonumber(ARGV[k + 1])
  n = n + redis.call('ZREM', ctx().archive, id)
  local run = run_key(id)
  local h = redis.call('HMGET', run, F.TENANT, F.STATUS, F.AGENT, F.SESSION_ID, F.BATCH)
  if h[1] then
    local t = h[1]
    redis.call('ZREM', index_key(t, DIM.ALL, ''), id)
    redis.call('ZREM', index_key(t, DIM.STATUS, h[2] or ''), id)
    if (h[3] or '') ~= '' then redis.call('ZREM', index_key(t, DIM.AGENT, h[3]), id) end
    if (h[4] or '') ~= '' then redis.call('ZREM', index_key(t, DIM.SESSION, h[4]), id) end
    if (h[5] or '') ~= '' then
      redis.call('ZREM', index_key(t, DIM.BATCH, h[5]), id)
      redis.call('ZREM', index_key(t, DIM.ITEM, h[5]), id)
    end
    for j = 1, nterms do redis.call('ZREM', index_key(t, DIM.META, ARGV[k + 1 + j]), id) end
    redis.call('ZREM', ctx().tenant_active .. t, id)  -- ended: no longer counts toward maxActive
    redis.call('HSET', run, F.ARCHIVED, '1')
    -- what no read of a finished run needs (a field costs ~80 bytes in a hash this size)
    redis.call('HDEL', run, F.CKPT, F.CONFIG, F.INPUT, F.APPROVALS, F.CLIENT_PENDING, F.HELD, F.OWNER, F.CRASHES,
      F.ABORT, F.AWAITING_SINCE, F.APPROVAL_TIMEOUT_MS, F.RUN_DEADLINE_MS, F.LOOP)
    if live > 0 then redis.call('EXPIRE', run, live) else redis.call('DEL', run) end
  end
  redis.call('DEL', stream_key(id), tools_key(id), transcript_key(id))
  if redis.call('EXISTS', ctx().gone .. id) == 1 then deleted[#deleted + 1] = id end
  k = k + 2 + nterms
end
return {n, unpack(deleted)}
