-- Runs an archiver has committed to PostgreSQL: out of the archive index, marked archived, their
-- stream and tool records dropped (the archive serves them now), the run hash kept without its
-- input and checkpoint for the live retention, then expiring.
-- KEYS: none of its own (run keys from the context; the archive index is the context's archive)
-- ARGV: liveRetentionS, then runIds
-- Reply: how many were still waiting in the index
local live = tonumber(ARGV[1])
local n = 0
for k = 2, #ARGV do
  local id = ARGV[k]
  n = n + redis.call('ZREM', ctx().archive, id)
  local run = run_key(id)
  if redis.call('EXISTS', run) == 1 then
    redis.call('HSET', run, F.ARCHIVED, '1')
    redis.call('HDEL', run, F.CKPT, F.INPUT, F.APPROVALS, F.CLIENT_PENDING)
    if live > 0 then redis.call('EXPIRE', run, live) else redis.call('DEL', run) end
  end
  redis.call('DEL', stream_key(id), tools_key(id))
end
return n
