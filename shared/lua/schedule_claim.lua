-- Claim the due schedules of one partition for a lease, fairly across tenants: each tenant with
-- schedules due (the longest waiting first, at most `limit` of them) gets an equal share of the
-- `limit`, and at most `share` schedules, so one tenant's backlog makes a look no longer than its
-- share's firings while another's schedule waits for the next look. A claimed schedule's
-- due score moves to the lease's expiry, so racing firers never claim one schedule at once, and a
-- firer that dies holding a claim leaves it to be claimed again when the lease expires (its
-- firings' run ids are deterministic, so making one again creates nothing new).
-- schedule_advance.lua sets the next firing.
-- The call: shared.calls.schedules.ScheduleClaim (the single due set of older versions is moved here
-- when the firer asks: its first look, then one look in MIGRATE_EVERY, producer/schedules/firer.py).
-- Returns: {now (ms, Redis time), schedule key, its tenant, …}
local now = now_ms()
local tenants, prefix = KEY.DUE_TENANTS, ARG.DUE_PREFIX
-- Schedules created by an older version: to their tenant's set (a firer asks now and then: MIGRATE).
if ARG.MIGRATE == '1' and redis.call('EXISTS', KEY.DUE_BEFORE) == 1 then
  local before = redis.call('ZRANGE', KEY.DUE_BEFORE, 0, -1, 'WITHSCORES')
  local seen = {}
  for i = 1, #before, 2 do
    local t = redis.call('HGET', ARG.SCHEDULE_PREFIX .. before[i], SCHED.TENANT)
    if t then
      redis.call('ZADD', prefix .. t, before[i + 1], before[i])
      seen[t] = true
    end
  end
  redis.call('DEL', KEY.DUE_BEFORE)
  for t in pairs(seen) do due_sync(prefix .. t, tenants, t) end
end
local lease, limit = now + tonumber(ARG.LEASE_MS), tonumber(ARG.LIMIT)
local due = redis.call('ZRANGEBYSCORE', tenants, '-inf', now, 'LIMIT', 0, limit)
local ids = {now}
local function take(t, n)
  local got = redis.call('ZRANGEBYSCORE', prefix .. t, '-inf', now, 'LIMIT', 0, n)
  for _, id in ipairs(got) do
    redis.call('ZADD', prefix .. t, lease, id)
    ids[#ids + 1] = id
    ids[#ids + 1] = t
  end
  return #got
end
if #due > 0 then
  local share = math.max(1, math.min(tonumber(ARG.SHARE), math.floor(limit / #due)))
  for _, t in ipairs(due) do
    take(t, share)
    due_sync(prefix .. t, tenants, t)
  end
end
return ids
