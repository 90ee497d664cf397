-- An archiver claims up to ``limit`` finished runs of the partition's archive index that are due
-- (ended, or their last claim expired) for ``leaseMs``: each moves to now + leaseMs, so no other
-- archiver takes it meanwhile, and one whose archiver died is taken again after the lease.
-- The call: shared.calls.claims.ArchiveClaim.
-- Reply: the runIds claimed, each followed by its claim (the score it now has, for archive_done)
local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', ctx().archive, '-inf', now, 'LIMIT', 0, tonumber(ARG.LIMIT))
local until_ = now + tonumber(ARG.LEASE_MS)
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZADD', ctx().archive, until_, id)
  out[#out + 1] = id
  out[#out + 1] = tostring(until_)
end
return out
