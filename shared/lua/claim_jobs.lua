-- arq's job start, batched: claim up to ARG.LIMIT of the given job ids in one round trip, with arq's
-- own rule (the job is due and nobody holds its in-progress key); a claimed job leaves the queue.
-- Given no ids, the call picks the queue's due jobs itself, in queue order (the worker's poll: the
-- ids never travel to the worker and back, and a woken worker claims in one round trip).
-- The call: shared.calls.dispatch.ClaimJobs (the partition's queue, live index, scheduled jobs and
-- depth counters are its fixed keys).
-- Reply: per claimed job its id, its queue score and, with a lease id, what acquire_run answered
-- for its run (the worker took it in the same call: one script a job, not a claim and an acquire;
-- a verdict other than ok ends the job as an acquire's would), else an empty list. A worker whose
-- lease has expired claims nothing.
-- First the scheduled jobs now due (runAt reached) move to the queue, scored as if enqueued at
-- their runAt (queue_score): they are claimed by the next poll (a run with a concurrency key whose
-- slots are all held waits for one instead: conc_take).
-- A claimed run's reconciler check moves to one lease from now: if its worker dies before it takes
-- the lease, the sweep finds the run still queued with its job in progress and re-dispatches it.
-- Fair dispatch: a job whose tenant already runs its maxRunning is not claimed; it moves, with its
-- score, to the tenant's held set, so the jobs of other tenants behind it come within arq's poll
-- window, and goes back to the queue at that score when a run of the tenant stops running (track
-- in prelude.lua): it keeps its place among the tenant's runs.
local PICK_MAX = 1024  -- due jobs one call looks at, at most, when it picks them itself
local out = {}
local now = tonumber(ARG.NOW_MS)
local limit = tonumber(ARG.LIMIT)
local check_ms = tonumber(ARG.CHECK_MS)
local check_at = now + check_ms
local max_running = tonumber(ARG.MAX_RUNNING)
local caps = {}
if ARG.RUNNING_CAPS ~= '' then caps = cjson.decode(ARG.RUNNING_CAPS) end

local due = redis.call('ZRANGEBYSCORE', SCHEDULED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1000)
for i = 1, #due, 2 do
  local jid = due[i]
  redis.call('ZREM', SCHEDULED, jid)
  local rid = run_of_job(jid)
  local run = run_key(rid)
  local h = redis.call('HMGET', run, F.STATUS, F.PRIORITY, F.TENANT, F.CONC_KEY, F.CONC_LIMIT, F.WAITING_FOR)
  if h[1] == S.SCHEDULED then
    if (h[6] or '') ~= '' then redis.call('HSET', run, F.WAITING_FOR, '') end  -- its rate key's start came
    local p = tonumber(h[2] or '') or DEFAULT_PRIORITY
    local score = queue_score(tonumber(due[i + 1]), p)
    redis.call('HSET', run, F.STATUS, S.QUEUED)
    track(run, rid, S.SCHEDULED, S.QUEUED)
    if (h[4] or '') == '' or conc_take(run, rid, h[3] or '', h[4], tonumber(h[5] or '') or 1, score) then
      redis.call('ZADD', QUEUE, score, jid)
      redis.call('HINCRBY', DEPTH, p, 1)
      wake()
    else  -- waiting for a slot of its concurrency key: no reconciler check until it has one
      redis.call('ZREM', LIVE, rid)
    end
  end
end

local counts = {}
-- Runs of the tenant still running (or claimed moments ago and not yet started). A run leaves the
-- set when it stops running (track); what a lost update left behind is pruned, oldest claims first
-- and at most 200 a call, only when the set looks full.
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
    local left = redis.call('ZCARD', key)
    if left < n then unhold(t, n - left) end
    n = left
  end
  counts[t] = n
  return n
end
local worker = ARG.LEASE_ID
local alive = worker == '' or worker_alive(worker)

-- One job: claimed (true), held back for its tenant's cap (true: it left the queue too), or left
-- where it is (false: not due, gone, or its in-progress key held).
local function take(id)
  local rid = run_of_job(id)
  local score = redis.call('ZSCORE', QUEUE, id)
  if not (score and tonumber(score) <= now) then return false end
  local h = redis.call('HMGET', run_key(rid), F.TENANT, F.PRIORITY)
  local tenant, cap = h[1] or '', 0
  if max_running > 0 or ARG.RUNNING_CAPS ~= '' then cap = tonumber(caps[tenant] or max_running) end
  if cap > 0 and running_count(tenant, cap) >= cap then
    redis.call('ZREM', QUEUE, id)
    redis.call('ZADD', tenant_held_key(tenant), score, id)
    return true
  end
  if not redis.call('SET', ARG.IN_PROGRESS_PREFIX .. id, '1', 'NX', 'PX', ARG.IN_PROGRESS_MS) then
    return false
  end
  -- Claimed: off the queue, so later polls (every worker's, every 50 ms) do not scan it again
  -- while it runs. A lost claim is found by the reconciler (the run's live-index check), not
  -- by arq's in-progress expiry.
  redis.call('ZREM', QUEUE, id)
  depth_down(tonumber(h[2] or '') or DEFAULT_PRIORITY)
  out[#out + 1] = id
  out[#out + 1] = score
  redis.call('ZADD', LIVE, 'XX', 'LT', check_at, rid)
  if cap > 0 then
    redis.call('ZADD', tenant_running_key(tenant), now, rid)
    counts[tenant] = counts[tenant] + 1
  end
  if worker ~= '' then
    out[#out + 1] = acquire_run(run_key(rid), stream_key(rid), tools_key(rid), rid, gen_of_job(id), worker, true)
  else
    out[#out + 1] = {}
  end
  return true
end

if not alive then return out end
if ARGN.JOB_IDS <= #ARGV then
  for i = ARGN.JOB_IDS, #ARGV do
    if #out >= 3 * limit then break end
    take(ARGV[i])
  end
  return out
end
-- No ids given: the queue's due jobs in its order, read a page at a time (a page is what is still
-- to claim; the jobs left where they were are skipped by the next page), at most PICK_MAX looked at.
local left_behind, looked = 0, 0
while #out < 3 * limit and looked < PICK_MAX do
  local page = redis.call('ZRANGEBYSCORE', QUEUE, '-inf', now, 'LIMIT', left_behind, limit - math.floor(#out / 3))
  if #page == 0 then break end
  for _, id in ipairs(page) do
    looked = looked + 1
    if not take(id) then left_behind = left_behind + 1 end
  end
end
return out
