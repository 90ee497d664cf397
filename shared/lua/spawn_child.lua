-- A sub-agent call's child run, created on the child's partition (shared/children.py): submit_one's
-- run, with its parent's run id, the parent's tool call and its ancestry, and in its tenant's index of
-- the parent's children. Made again (a resumed parent), it finds the same run ('exists').
-- A new child counts against its tenant's maxActive like a submitted run (admit_tenant.lua): without
-- room it is not created ({'quota_exceeded', the tenant's runs counted here}).
-- KEYS: as submit_one's, then the tenant's active zset on this partition
-- ARGV: parentRunId, parentToolCallId, ancestry JSON (config.Lineage), maxActive for this partition
--       (the tenant's quota less its runs counted on the other partitions; '' = none), active set
--       ttl ms, grace ms, then submit_one's A
local parent, call, lineage = table.remove(ARGV, 1), table.remove(ARGV, 1), table.remove(ARGV, 1)
local room, ttl, grace = table.remove(ARGV, 1), table.remove(ARGV, 1), table.remove(ARGV, 1)
if room ~= '' and redis.call('EXISTS', KEYS[1]) == 0 and not redis.call('ZSCORE', KEYS[6], ARGV[1]) then
  local now = now_ms()
  local count = redis.call('ZCARD', KEYS[6])
  if count + 1 > tonumber(room) then count = active_pruned(KEYS[6], now, tonumber(grace)) end
  if count + 1 > tonumber(room) then return {'quota_exceeded', tostring(count)} end
  redis.call('ZADD', KEYS[6], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[6], ttl)
end
local r = submit_one(KEYS, ARGV)
if r[1] == 'created' then
  redis.call('HSET', KEYS[1], F.PARENT_RUN, parent, F.PARENT_CALL, call, F.ANCESTRY, lineage)
  ix_add(ARGV[4], DIM.PARENT, parent, ARGV[1], tonumber(redis.call('HGET', KEYS[1], F.CREATED_AT)))
end
return r
