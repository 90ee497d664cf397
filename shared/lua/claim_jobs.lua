-- arq's job start, batched: claim up to ARGV[3] of the given job ids in one round trip, with arq's
-- own rule (the job is due and nobody holds its in-progress key); a claimed job leaves the queue.
-- KEYS: none of its own (the partition's queue and live index)
-- ARGV: now ms, in-progress ttl ms, most jobs to claim, in-progress key prefix, claim check ms,
--       default maxRunning per tenant (0: none), {tenant: maxRunning} JSON or '', push-back ms, job ids…
-- A claimed run's reconciler check moves to one lease from now: if its worker dies before it takes
-- the lease, the sweep finds the run still queued with its job in progress and re-dispatches it.
-- Fair dispatch: a job whose tenant already runs its maxRunning is not claimed; its score moves
-- push-back ms ahead, so the jobs of other tenants behind it come within arq's poll window.
local out = {}
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[3])
local check_ms = tonumber(ARGV[5])
local check_at = now + check_ms
local max_running = tonumber(ARGV[6])
local caps = {}
if ARGV[7] ~= '' then caps = cjson.decode(ARGV[7]) end
local push_to = now + tonumber(ARGV[8])
local counts = {}
-- Runs of the tenant still running (or claimed moments ago and not yet started); the set is
-- pruned, oldest claims first and at most 200 a call, only when it looks full.
local function running_count(t, cap)
  if counts[t] then return counts[t] end
  local key = tenant_running_key(t)
  local n = redis.call('ZCARD', key)
  if n >= cap then
    local members = redis.call('ZRANGE', key, 0, 199, 'WITHSCORES')
    for i = 1, #members, 2 do
      local st = redis.call('HGET', run_key(members[i]), F.STATUS)
      if st ~= S.RUNNING and not (st == S.QUEUED and tonumber(members[i + 1]) >= now - check_ms) then
        redis.call('ZREM', key, members[i])
      end
    end
    n = redis.call('ZCARD', key)
  end
  counts[t] = n
  return n
end
for i = 9, #ARGV do
  if #out >= 2 * limit then break end
  local id = ARGV[i]
  local rid = run_of_job(id)
  local score = redis.call('ZSCORE', QUEUE, id)
  if score and tonumber(score) <= now then
    local tenant, cap = '', 0
    if max_running > 0 or ARGV[7] ~= '' then
      tenant = redis.call('HGET', run_key(rid), F.TENANT) or ''
      cap = tonumber(caps[tenant] or max_running)
    end
    if cap > 0 and running_count(tenant, cap) >= cap then
      redis.call('ZADD', QUEUE, 'XX', push_to, id)
    elseif redis.call('SET', ARGV[4] .. id, '1', 'NX', 'PX', ARGV[2]) then
      -- Claimed: off the queue, so later polls (every worker's, every 50 ms) do not scan it again
      -- while it runs. A lost claim is found by the reconciler (the run's live-index check), not
      -- by arq's in-progress expiry.
      redis.call('ZREM', QUEUE, id)
      out[#out + 1] = id
      out[#out + 1] = score
      redis.call('ZADD', LIVE, 'XX', 'LT', check_at, rid)
      if cap > 0 then
        redis.call('ZADD', tenant_running_key(tenant), now, rid)
        counts[tenant] = counts[tenant] + 1
      end
    end
  end
end
return out
