-- arq's job start, batched: claim up to ARG.LIMIT of the given job ids in one round trip, with arq's
-- own rule (the job is due and nobody holds its in-progress key); a claimed job leaves the queue.
-- Given no ids, the call picks the queue's due jobs itself, in turns between tenants (below: the
-- worker's poll: the ids never travel to the worker and back, and a woken worker claims in one
-- round trip).
-- The call: shared.calls.dispatch.ClaimJobs (the partition's queue, live index, scheduled jobs and
-- depth counters are its fixed keys).
-- Reply: per claimed job its id, its queue score and, with a lease id, what acquire_run answered
-- for its run (the worker took it in the same call: one script a job, not a claim and an acquire;
-- a verdict other than ok ends the job as an acquire's would), else an empty list. A worker whose
-- lease has expired claims nothing. The worker starts the jobs in the reply's order.
-- First the scheduled jobs now due (runAt reached) move to the queue, scored as if enqueued at
-- their runAt (queue_score): they are claimed by the next poll (a run with a concurrency key whose
-- slots are all held waits for one instead: conc_take).
-- A run claimed without a lease id (taken later, by acquire.lua) has its reconciler check moved to
-- one lease from now: if its worker dies before it takes the run, the sweep finds the run still
-- queued with its job in progress and re-dispatches it. A run taken in the claim needs no such
-- check: taken, it leaves the live index (acquire_run); refused, it is not a queued run waiting
-- for this job (a queued run has no owner, so it is not busy; missing, terminal, superseded or
-- exhausted, its own check, if any, stands).
-- Fair dispatch, between tenants: a job whose tenant already runs its maxRunning is not claimed; it
-- moves, with its score, to the tenant's held set, so the jobs of other tenants behind it come
-- within arq's poll window, and goes back to the queue at that score when a run of the tenant stops
-- running (track in prelude.lua): it keeps its place among the tenant's runs. Within one claim, the
-- tenants take turns (below): a burst of one tenant's jobs does not fill a batch, nor start first,
-- ahead of another tenant's job just behind it.
local PICK_MAX = 1024  -- due jobs one call looks at, at most, when it picks them itself
local LOOK_AHEAD = 64  -- due jobs a window reads past what is still to claim, at most (below)
local out = {}
local now = tonumber(ARG.NOW_MS)
if now == 0 then now = now_ms() end  -- a claim sent before it runs (behind a wake wait): the server's clock
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

-- One due job (its run id, queue score, tenant and priority read): claimed (CLAIMED), held back
-- for its tenant's cap (HELD: it left the queue too), or left where it is (nil: its in-progress
-- key held).
local CLAIMED, HELD = 1, 2
local function take(id, rid, score, tenant, priority)
  local cap = 0
  if max_running > 0 or ARG.RUNNING_CAPS ~= '' then cap = tonumber(caps[tenant] or max_running) end
  if cap > 0 and running_count(tenant, cap) >= cap then
    redis.call('ZREM', QUEUE, id)
    redis.call('ZADD', tenant_held_key(tenant), score, id)
    return HELD
  end
  if not redis.call('SET', ARG.IN_PROGRESS_PREFIX .. id, '1', 'NX', 'PX', ARG.IN_PROGRESS_MS) then
    return nil
  end
  -- Claimed: off the queue, so later polls (every worker's, every 50 ms) do not scan it again
  -- while it runs. A lost claim is found by the reconciler (the run's live-index check), not
  -- by arq's in-progress expiry.
  redis.call('ZREM', QUEUE, id)
  depth_down(tonumber(priority or '') or DEFAULT_PRIORITY)
  out[#out + 1] = id
  out[#out + 1] = score
  if cap > 0 then
    redis.call('ZADD', tenant_running_key(tenant), now, rid)
    counts[tenant] = counts[tenant] + 1
  end
  if worker ~= '' then
    out[#out + 1] = acquire_run(run_key(rid), stream_key(rid), tools_key(rid), rid, gen_of_job(id), worker, true)
  else  -- taken later (acquire.lua): checked by then
    redis.call('ZADD', LIVE, 'XX', 'LT', check_at, rid)
    out[#out + 1] = {}
  end
  return CLAIMED
end

if not alive then return out end
local function full() return #out >= 3 * limit end
if ARGN.JOB_IDS <= #ARGV then
  for i = ARGN.JOB_IDS, #ARGV do
    if full() then break end
    local id = ARGV[i]
    local score = redis.call('ZSCORE', QUEUE, id)
    if score and tonumber(score) <= now then  -- else not due, or gone
      local rid = run_of_job(id)
      local h = redis.call('HMGET', run_key(rid), F.TENANT, F.PRIORITY)
      take(id, rid, score, h[1] or '', h[2])
    end
  end
  return out
end
-- No ids given: the queue's due jobs, a window at a time (what is still to claim and as many again,
-- up to LOOK_AHEAD more; at most PICK_MAX looked at in all), claimed in turns between the tenants
-- in the window: each tenant's first job, the tenants in the order of their first jobs in the
-- queue, then each one's second, and so on until the limit. A tenant alone claims in queue order,
-- as much as before; a burst of one tenant's jobs just ahead of another's job no longer fills the
-- batch first, nor starts first (the worker starts the jobs in the reply's order). Another
-- tenant's job further back is seen as the burst leaves the queue, or is held at its tenant's cap.
-- A job left where it was (its in-progress key held) is skipped by the next window.
local left_behind, looked = 0, 0
while not full() and looked < PICK_MAX do
  local left = limit - #out / 3
  local want = math.min(left + math.min(left, LOOK_AHEAD), PICK_MAX - looked)
  local page = redis.call('ZRANGEBYSCORE', QUEUE, '-inf', now, 'WITHSCORES', 'LIMIT', left_behind, want)
  if #page == 0 then break end
  local tenants, jobs = {}, {}
  for i = 1, #page, 2 do
    local rid = run_of_job(page[i])
    local h = redis.call('HMGET', run_key(rid), F.TENANT, F.PRIORITY)
    local t = h[1] or ''
    if not jobs[t] then jobs[t] = {}; tenants[#tenants + 1] = t end
    local q = jobs[t]
    q[#q + 1] = {page[i], rid, page[i + 1], h[2]}
  end
  looked = looked + #page / 2
  local turn = 1
  while #tenants > 0 and not full() do
    local next_turn = {}
    for _, t in ipairs(tenants) do
      if full() then break end
      local q = jobs[t]
      local j = q[turn]
      local got = take(j[1], j[2], j[3], t, j[4])
      if got == HELD then  -- its other jobs here too: they go back in their order as its runs stop
        for k = turn + 1, #q do take(q[k][1], q[k][2], q[k][3], t, q[k][4]) end
      elseif q[turn + 1] then
        next_turn[#next_turn + 1] = t
      end
      if got == nil then left_behind = left_behind + 1 end
    end
    tenants = next_turn
    turn = turn + 1
  end
  if #page / 2 < want then break end
end
return out
