-- A partition's due schedules, per tenant: each tenant's due set (schedule key -> its next firing,
-- or its claim's expiry) and the set of tenants with schedules there (tenant -> the earliest score
-- of its due set), which the firers take a share of each tenant from (schedule_claim.lua). Every
-- script that changes a tenant's due set keeps the tenant's score with due_sync.
local function due_sync(due, tenants, tenant)
  local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  if first[1] then
    redis.call('ZADD', tenants, first[2], tenant)
  else
    redis.call('ZREM', tenants, tenant)
  end
end
