-- A sub-agent call's child run, created on the child's partition (shared/children.py): submit_one's
-- run, with its parent's run id, the parent's tool call and its ancestry, and in its tenant's index of
-- the parent's children. Made again (a resumed parent), it finds the same run ('exists').
-- A new child counts against its tenant's maxActive like a submitted run (admit_tenant.lua): without
-- room it is not created ({'quota_exceeded', the tenant's runs counted here}).
local A = {}
for k = ARGN.RUN, #ARGV do A[#A + 1] = ARGV[k] end
local id = A[NEW.RUN_ID]
if ARG.ROOM ~= '' and redis.call('EXISTS', KEY.RUN) == 0 and not redis.call('ZSCORE', KEY.TENANT_ACTIVE, id) then
  local now = now_ms()
  local count = redis.call('ZCARD', KEY.TENANT_ACTIVE)
  local room = tonumber(ARG.ROOM)
  if count + 1 > room then count = active_pruned(KEY.TENANT_ACTIVE, now, tonumber(ARG.GRACE_MS)) end
  if count + 1 > room then return {V.QUOTA_EXCEEDED, tostring(count)} end
  redis.call('ZADD', KEY.TENANT_ACTIVE, now, id)
  redis.call('PEXPIRE', KEY.TENANT_ACTIVE, ARG.ACTIVE_TTL_MS)
end
local r = submit_one(KEYS, A)
if r[1] == V.CREATED then
  redis.call('HSET', KEY.RUN, F.PARENT_RUN, ARG.PARENT_RUN_ID, F.PARENT_CALL, ARG.PARENT_CALL_ID, F.ANCESTRY, ARG.ANCESTRY)
  ix_add(A[NEW.TENANT], DIM.PARENT, ARG.PARENT_RUN_ID, id, tonumber(redis.call('HGET', KEY.RUN, F.CREATED_AT)))
end
return r
