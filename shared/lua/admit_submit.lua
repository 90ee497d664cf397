-- One run admitted and created in one call (a single submission with its tenant's quotas): the
-- tenant's submission rate (its bucket, rate_bucket.lua, when it lives on this partition: ARG.PER_SECOND
-- not 0), then its maxActive here (ARG.ROOM: admit_tenant.lua's room; '' = none), then submit_one.
-- A refusal changes nothing: the bucket gives its token only once both admit the run, and the run
-- is counted against maxActive only once submit_one created it (a run refused there, or one there
-- already, is not counted again). ARG.AUDIT: the submission's audit entry (JSON: [max entries, field,
-- value, …]; '' = none), written once the run is admitted, whatever submit_one answers. Reply: submit_one's, or {V.RATE_LIMITED, ms until a token is
-- there} | {V.QUOTA_EXCEEDED, the tenant's runs counted here}.
local A = {}
for k = ARGN.RUN, #ARGV do A[#A + 1] = ARGV[k] end
local id = A[NEW.RUN_ID]
local now = now_ms()
local rate = tonumber(ARG.PER_SECOND)
local full, tokens = tonumber(ARG.BURST) * 1000, 0
if rate > 0 then
  tokens = bucket_level(KEY.BUCKET, rate, full, now)
  if tokens < 1000 then
    bucket_set(KEY.BUCKET, tokens, rate, full, now)
    return {V.RATE_LIMITED, math.ceil((1000 - tokens) / rate)}
  end
end
local counted = ARG.ROOM == '' or redis.call('ZSCORE', KEY.TENANT_ACTIVE, id)
if not counted then
  local room = tonumber(ARG.ROOM)
  local count = redis.call('ZCARD', KEY.TENANT_ACTIVE)
  if count + 1 > room then count = active_pruned(KEY.TENANT_ACTIVE, now, tonumber(ARG.GRACE_MS)) end
  if count + 1 > room then return {V.QUOTA_EXCEEDED, count} end
end
if rate > 0 then bucket_set(KEY.BUCKET, tokens - 1000, rate, full, now) end
if ARG.AUDIT ~= '' then
  local e = cjson.decode(ARG.AUDIT)
  redis.call('XADD', KEY.AUDIT, 'MAXLEN', '~', e[1], '*', unpack(e, 2))
end
local r = submit_one(KEYS, A)
if not counted and r[1] == V.CREATED then
  redis.call('ZADD', KEY.TENANT_ACTIVE, 'NX', now, id)
  redis.call('PEXPIRE', KEY.TENANT_ACTIVE, ARG.ACTIVE_TTL_MS)
end
return r
