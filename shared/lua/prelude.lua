-- The prelude of every script on a partition: its context, and the helpers those scripts share.
-- Every call passes, besides its own keys and arguments (documented in each script, numbered as
-- if these were not there):
--   KEYS (last eight): the partition's arq queue, live index, awaiting index, workers, webhook list,
--         scheduled jobs, queue depth per priority, wake list
--   ARGV (last): the partition's context (shared.scripts.Scripts.context: the key prefixes of
--            shared.keys.Partition.context, the arq job template, the settings), parsed on demand
-- enter_prelude (at the end) takes them off at the start of each call: with Redis Functions this
-- file runs once, when the library loads, and each call only runs enter_prelude (shared.scripts).
-- Every local below that a call changes is reset there.
-- With Redis Functions a call sends, instead of the context, its token (shared.functions: a few
-- bytes where the context is some 500, each byte of an argument hashed as Lua takes it in) and, when
-- it has keys of its own, not the eight fixed keys either: the library keeps both per token, told
-- them by register_contexts; a token it was not told (a restarted or new node, the table reset)
-- fails the call before it does anything, and the caller tells it and sends the call again.
local CTX_RAW, DEPTH, SCHEDULED, WEBHOOKS, WORKERS, AWAITING, LIVE, QUEUE = nil, nil, nil, nil, nil, nil, nil, nil
local WAKE, WAKES = nil, 0
local CTX = nil
local CTX_OF, CTX_COUNT = {}, 0  -- raw context or token -> parsed, kept across the calls of a library
local FIXED_OF = {}  -- a token sent without the fixed keys -> those keys (the library's, as CTX_OF)
local function parsed_context(raw)
  local c = {}
  local names = {__CONTEXT_FIELDS__}
  local i = 1
  for v in string.gmatch(raw, '([^\031]*)\031') do c[names[i]] = v; i = i + 1 end
  return c
end
local function keep_context(key, c)
  if CTX_COUNT >= 1000 then CTX_OF, FIXED_OF, CTX_COUNT = {}, {}, 0 end  -- bounded: one per partition and settings
  CTX_OF[key] = c
  CTX_COUNT = CTX_COUNT + 1
end
local function ctx()
  if CTX then return CTX end
  CTX = CTX_OF[CTX_RAW]
  if CTX then return CTX end
  CTX = parsed_context(CTX_RAW)
  keep_context(CTX_RAW, CTX)
  return CTX
end
-- The library told the contexts' tokens (shared.functions.FunctionScript.load; Functions only): per
-- context its token sent with the fixed keys, its token sent without them, the context, the fixed keys.
local function register_contexts(ARGV)
  if CTX_COUNT + 2 * #ARGV / 11 > 1000 then CTX_OF, FIXED_OF, CTX_COUNT = {}, {}, 0 end  -- all of them kept
  for i = 1, #ARGV, 11 do
    local c = parsed_context(ARGV[i + 2])
    keep_context(ARGV[i], c)
    keep_context(ARGV[i + 1], c)
    FIXED_OF[ARGV[i + 1]] = {ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8],
      ARGV[i + 9], ARGV[i + 10]}
  end
  return #ARGV / 11
end
-- Keys that depend on what a script reads: a prefix of the context followed by an id.
local function run_key(id) return ctx().run .. id end
local function stream_key(id) return ctx().events .. id end
local function tools_key(id) return ctx().tools .. id end
local function transcript_key(id) return ctx().transcript .. id end
local function session_key(sid) return ctx().session .. sid end
local function tenant_running_key(t) return ctx().tenant_running .. t end
local function tenant_held_key(t) return ctx().tenant_held .. t end
local function worker_runs_key(w) return ctx().worker_runs .. w end
local function worker_inbox_key(w) return ctx().worker_inbox .. w end
local function worker_lease_key(w) return ctx().worker_lease .. w end
-- arq job id of dispatch ``gen`` of a run (shared.keys.Partition.job_id) and its job payload
-- (shared.dispatch.JOB_TEMPLATE: four pieces around the run id, dispatch number and enqueue time).
local function job_id(id, gen)
  if gen > 1 then return ctx().job_id .. id .. '#' .. gen end
  return ctx().job_id .. id
end
-- The run id of a job id (its tag and '#gen' off).
local function run_of_job(jid)
  local rest = string.sub(jid, #ctx().job_id + 1)
  return string.match(rest, '^(.-)#%d+$') or rest
end
-- The dispatch number of a job id (job_id's '#gen', 1 without).
local function gen_of_job(jid)
  return tonumber(string.match(jid, '#(%d+)$') or '1')
end
-- Lanes: a job's score in its partition's queue is its due time less its priority times the aging
-- quantum (AGENTMILL_PRIORITY_AGING_MS), so the queue's order is priority first, FIFO within one,
-- and a run of priority p waiting (q - p) quanta longer than a run of priority q goes before it.
-- Every score is at most its due time, so arq's rule "due when score <= now" still holds.
local DEFAULT_PRIORITY = __DEFAULT_PRIORITY__
local function queue_score(due, priority)
  return due - (tonumber(priority) or DEFAULT_PRIORITY) * tonumber(ctx().aging_ms)
end
local function run_priority(id)
  return tonumber(redis.call('HGET', run_key(id), F.PRIORITY) or '') or DEFAULT_PRIORITY
end
-- A job left the queued jobs (claimed, aborted, replaced): one fewer of its priority.
local function depth_down(priority)
  if redis.call('HINCRBY', DEPTH, priority, -1) < 0 then redis.call('HSET', DEPTH, priority, 0) end
end
-- A job was made due (or scheduled) here: a signal on the partition's wake list, in the same call
-- as the job, so a waiting worker (BLPOP, one signal per worker) claims it now instead of at its next
-- poll. At most __WAKE_KEPT__ a call and kept: a burst wakes that many workers; their claims and the
-- others' polls take the rest.
local function wake()
  if WAKES >= __WAKE_KEPT__ then return end
  WAKES = WAKES + 1
  redis.call('LPUSH', WAKE, '1')
  redis.call('LTRIM', WAKE, 0, __WAKE_KEPT__ - 1)
end
-- n jobs of tenant t held back by its running cap go back to the queue, earliest first, each at
-- the score it was held with: ahead of the tenant's later jobs, as if never held.
local function unhold(t, n)
  local held = redis.call('ZPOPMIN', tenant_held_key(t), n or 1)
  for i = 1, #held, 2 do redis.call('ZADD', QUEUE, held[i + 1], held[i]) end
  if #held > 0 then wake() end
end
local function job_payload(id, gen, now)
  local c = ctx()
  return c.job_a .. id .. c.job_b .. gen .. c.job_c .. now .. c.job_d
end
local TERMINAL = {__TERMINAL__}  -- agentmill_client.statuses.TERMINAL
local function is_terminal(s)
  return TERMINAL[s] == true
end
-- Concurrency keys (RunInput.concurrency; keys.Partition.conc_running, conc_waiting): every run of
-- a key lives on the key's home partition, so the key's slots are counted here, in one slot.
local function conc_suffix(t, k) return #t .. ':' .. t .. ':' .. k end  -- keys.conc_suffix
local function conc_running_key(t, k) return ctx().conc_running .. conc_suffix(t, k) end
local function conc_waiting_key(t, k) return ctx().conc_waiting .. conc_suffix(t, k) end
local function debounce_key(t, k) return ctx().debounce .. conc_suffix(t, k) end
-- The runs holding a slot of a key (rk: its running set): those that ended or vanished without
-- letting go (none should) are forgotten, looking at most limit + 50, only when it looks full.
local function conc_holding(rk, limit)
  local n = redis.call('ZCARD', rk)
  if n < limit then return n end
  for _, id in ipairs(redis.call('ZRANGE', rk, 0, limit + 49)) do
    local st = redis.call('HGET', run_key(id), F.STATUS)
    if not st or is_terminal(st) then redis.call('ZREM', rk, id) end
  end
  return redis.call('ZCARD', rk)
end
-- A run of key k (tenant t) is ready for the queue (submitted, or its runAt reached): true when it
-- takes one of the key's slots (it holds it until it ends); else it waits in the key's waiting set
-- at its queue score (``score``), not on the queue and holding no worker, its waitingFor naming the
-- key, until conc_release gives it a slot.
local function conc_take(run, id, t, k, limit, score)
  local rk = conc_running_key(t, k)
  if conc_holding(rk, limit) < limit then
    redis.call('ZADD', rk, now_ms(), id)
    redis.call('EXPIRE', rk, ctx().retention)
    return true
  end
  local wk = conc_waiting_key(t, k)
  redis.call('ZADD', wk, score, id)
  redis.call('EXPIRE', wk, ctx().retention)
  redis.call('HSET', run, F.WAITING_FOR, 'concurrency:' .. k)
  return false
end
-- A run of key k ended: it lets go of its slot (or leaves the waiting set), and the waiting runs,
-- in their order, take the slots free now (each waiting run's own limit decides: the one asked with
-- the run), going to the queue at the score they waited with, ahead of later runs. At most 100
-- looked at a call.
local function conc_release(t, k, id)
  local rk, wk = conc_running_key(t, k), conc_waiting_key(t, k)
  if redis.call('ZREM', rk, id) == 0 then
    redis.call('ZREM', wk, id)
    return
  end
  local now = now_ms()
  for _ = 1, 100 do
    local nxt = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
    if #nxt == 0 then return end
    local wid = nxt[1]
    local run = run_key(wid)
    local h = redis.call('HMGET', run, F.STATUS, F.CONC_LIMIT, F.GEN, F.PRIORITY)
    redis.call('ZREM', wk, wid)
    if h[1] == S.QUEUED then
      local limit = tonumber(h[2] or '') or 1
      if conc_holding(rk, limit) >= limit then
        redis.call('ZADD', wk, nxt[2], wid)
        return
      end
      redis.call('ZADD', rk, now, wid)
      redis.call('HSET', run, F.WAITING_FOR, '')
      local jid = job_id(wid, tonumber(h[3] or '1') or 1)
      local p = tonumber(h[4] or '') or DEFAULT_PRIORITY
      redis.call('SET', ctx().job_key .. jid, job_payload(wid, tonumber(h[3] or '1') or 1, now), 'PX', ctx().job_expire_ms)
      redis.call('ZADD', QUEUE, nxt[2], jid)
      redis.call('HINCRBY', DEPTH, p, 1)
      redis.call('ZADD', LIVE, now + tonumber(ctx().queued_check_ms), wid)
      wake()
    end
  end
end
-- Is this worker lease id's lease unexpired? Its lease key exists (it expires by Redis's clock).
local function worker_alive(w)
  if not w or w == '' then return false end
  return redis.call('EXISTS', worker_lease_key(w)) == 1
end
-- The run leaves its worker (finished, handed back, waiting for someone): out of the worker's set.
local function leave_worker(run, run_id)
  local owner = redis.call('HGET', run, F.OWNER)
  if owner and owner ~= '' then redis.call('SREM', worker_runs_key(owner), run_id) end
end
-- Ask the worker running a run to abort it: the run hash holds the reason, the inbox the nudge.
-- With an actor (its JSON, shared/actors.py): the field holds both, as shared.actors.abort_field.
local function request_abort(run_id, reason, actor)
  local v = reason
  if actor and actor ~= '' then v = cjson.encode({reason = reason, actor = cjson.decode(actor)}) end
  redis.call('HSET', run_key(run_id), F.ABORT, v)
  local owner = redis.call('HGET', run_key(run_id), F.OWNER)
  if owner and owner ~= '' then
    local inbox = worker_inbox_key(owner)
    redis.call('RPUSH', inbox, run_id)
    redis.call('LTRIM', inbox, -__INBOX_KEPT__, -1)
  end
end
-- A tenant's counted runs (maxActive) in its active zset on this partition, after forgetting the
-- runs that ended (or whose hash never appeared within grace ms): oldest first, at most 200 a call,
-- so a full tenant costs Redis a bounded amount per refusal. A run that has not ended counts,
-- parked (awaiting a human, client tools or its children) or not.
local function active_pruned(key, now, grace)
  local members = redis.call('ZRANGE', key, 0, 199, 'WITHSCORES')
  for i = 1, #members, 2 do
    local st = redis.call('HGET', run_key(members[i]), F.STATUS)
    if (st and is_terminal(st)) or (not st and tonumber(members[i + 1]) < now - grace) then
      redis.call('ZREM', key, members[i])
    end
  end
  return redis.call('ZCARD', key)
end
-- Counts and seqs to and from text on the hot path: Lua's tonumber (strtod) and tostring (printf's
-- '%.14g') each cost more than a small Redis command; a count of a few is looked up, an integer
-- printed with '%d' (exact to 2^53, where '%.14g' turns 1e14 into '1e+14').
local SMALL = {['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6, ['7'] = 7, ['8'] = 8}
local function num(s) return SMALL[s] or tonumber(s) end
local NONE = {}  -- an empty list passed where a call has none (never changed)
local CHUNK = 1000  -- the arguments one redis.call takes from unpack at most (even: pairs stay whole)
-- Texts that go into JSON as they are (commit.lua's claims): a positive integer, an id.
local function plain_int(s) return #s < 15 and string.find(s, '^[1-9]%d*$') ~= nil end
local function plain_id(s) return string.find(s, '^[%w%._:%-]+$') ~= nil end
local function int_text(x) return string.format('%d', x) end
-- One stream entry at seq text ``s`` (its id <seq>-0: an id given without its sequence part gets 0,
-- and the seq's text is not joined to '-0' into one more Lua string), trimmed to about ``maxlen``
-- (nil: not trimmed).
local function xadd_text(stream, s, kind, ts, payload, maxlen, epoch)
  if maxlen then
    redis.call('XADD', stream, 'MAXLEN', '~', maxlen, s, 'seq', s, 'kind', kind, 'ts', ts, 'payload', payload, 'epoch', epoch)
  else
    redis.call('XADD', stream, s, 'seq', s, 'kind', kind, 'ts', ts, 'payload', payload, 'epoch', epoch)
  end
end
local function xadd(stream, seq, kind, ts, payload, maxlen, epoch)
  -- seq formatted once: a Lua number is printed again for each place it is passed (.. and redis.call)
  xadd_text(stream, int_text(seq), kind, ts, payload, maxlen, epoch)
end
-- The gate of a worker's append to its run (commit.lua, publish.lua). h: the run hash's F.EPOCH,
-- F.LAST_SEQ, F.OWNER first; the caller's epoch, lease id and lease key; its first seq; its ARGV and
-- the index there of its events' count (kind, payload per event follow it), read only when the
-- seq does not follow. nil: go on. Else the answer: the run is missing; fenced (another epoch,
-- another owner, or the caller's lease gone: a worker past its lease writes nothing, even before
-- anyone took its runs over); or the stream does not end at first - 1. ``lease_key`` and ``stream``
-- nil: built from ``lease_id`` and ``run_id`` when needed (commit.lua: the refusals before them
-- build neither).
local function append_refused(h, epoch, lease_id, lease_key, stream, first, args, at, run_id)
  if not h[1] then return {APPEND.MISSING} end
  if h[1] ~= epoch and tonumber(h[1]) ~= tonumber(epoch) then return {APPEND.FENCED, h[1]} end
  if h[3] ~= lease_id or redis.call('EXISTS', lease_key or worker_lease_key(lease_id)) == 0 then
    return {APPEND.FENCED, h[1]}
  end
  if tonumber(h[2]) ~= first - 1 then
    -- The same append sent again after its reply was lost (redis-py retries on connection errors):
    -- same epoch, the stream ends where this batch ends, with this batch's last event. It was
    -- applied; answer as the first time did instead of refusing the worker its own write.
    local n = tonumber(args[at])
    local last_payload = args[at + 2 * n]
    local last0 = first + n - 1
    if n > 0 and tonumber(h[2]) == last0 then
      local e = redis.call('XRANGE', stream or stream_key(run_id), last0 .. '-0', last0 .. '-0')
      if #e == 1 then
        local f = {}
        for k = 1, #e[1][2], 2 do f[e[1][2][k]] = e[1][2][k + 1] end
        if f.epoch == epoch and f.payload == last_payload then return {APPEND.OK, h[2]} end
      end
    end
    return {APPEND.SEQ_CONFLICT, h[2]}
  end
  return nil
end
-- An append's n events (kind, payload each, from args[i]: the call's ARGV; ``ts`` theirs, the time
-- they were published, sent once) at seqs first..first+n-1, ``first_text`` the caller's text of
-- first (its argument as sent: no formatting for a commit's usual one event). The stream is
-- trimmed once, by the last of them. Returns the index after them and the last one's seq text
-- (nil for no event).
local function append_events(stream, first, first_text, n, args, i, epoch, ts)
  local s = nil
  for k = 0, n - 1 do
    s = k == 0 and first_text or int_text(first + k)
    xadd_text(stream, s, args[i], ts, args[i + 1], k == n - 1 and ctx().maxlen or nil, epoch)
    i = i + 2
  end
  return i, s
end
-- Listing indexes and batch counters (keys.index_key, keys.batch_key): each index is a zset
-- runId -> createdAt, trimmed to tonumber(ctx().index_max) entries and expiring a retention after its last write.
-- (shared.keys.Partition.index and .batch: the prefix, then the parts joined by ':')
local function index_key(t, dim, value) return ctx().index .. t .. ':' .. dim .. ':' .. value end
local function batch_key(t, b) return ctx().batch .. t .. ':' .. b end
-- While a script creates many runs, DEFERRED collects its ZADDs (key -> score, member, …) and TRIM
-- the indexes they touch: one ZADD per key and one trim per index at the end (flush_deferred).
local DEFERRED, TRIM = nil, nil
local function ix_trim(k)
  redis.call('ZREMRANGEBYRANK', k, 0, -tonumber(ctx().index_max) - 1)
  redis.call('EXPIRE', k, ctx().retention)
end
local function zadd(k, score, member)
  if not DEFERRED then return redis.call('ZADD', k, score, member) end
  local t = DEFERRED[k]
  if not t then t = {}; DEFERRED[k] = t end
  t[#t + 1] = score; t[#t + 1] = member
end
local BATCH_NEW = nil  -- while deferring: batch key -> {tenant, batchId, runs created}
-- n runs were created in a batch: create its hash if needed, count them (all start queued but the
-- ``sched`` of them with a runAt ahead).
local function batch_add(t, batch, n, now, sched)
  sched = sched or 0
  local bk = batch_key(t, batch)
  if redis.call('HSETNX', bk, BATCH.CREATED_AT, now) == 1 then redis.call('HSET', bk, BATCH.BATCH_ID, batch, BATCH.TENANT, t) end
  redis.call('HINCRBY', bk, BATCH.TOTAL, n)
  redis.call('HINCRBY', bk, S.QUEUED, n - sched)
  if sched > 0 then redis.call('HINCRBY', bk, S.SCHEDULED, sched) end
  redis.call('HDEL', bk, BATCH.FINISHED_AT)
  redis.call('EXPIRE', bk, ctx().retention)
end
local function flush_deferred()
  if not DEFERRED then return end
  for k, t in pairs(DEFERRED) do
    for i = 1, #t, 1000 do redis.call('ZADD', k, unpack(t, i, math.min(i + 999, #t))) end
  end
  for k in pairs(TRIM) do ix_trim(k) end
  for _, b in pairs(BATCH_NEW) do batch_add(b[1], b[2], b[3], now_ms(), b[4]) end
  DEFERRED, TRIM, BATCH_NEW = {}, {}, {}
end
-- A batch is finished once every run it has ended and no part is still to come (field open: the
-- latest request said more); then, once, its webhook is queued. A finished batch takes no new runs.
local function batch_settle(bk)
  local b = redis.call('HMGET', bk, BATCH.DONE, BATCH.TOTAL, BATCH.OPEN, BATCH.FINISHED_AT, BATCH.WEBHOOK)
  if b[4] or b[3] == '1' or tonumber(b[1] or '0') < tonumber(b[2] or '0') then return false end
  redis.call('HSET', bk, BATCH.FINISHED_AT, now_ms())
  if (b[5] or '') ~= '' then redis.call('LPUSH', WEBHOOKS, ctx().batch_delivery .. bk) end
  return true
end
local BATCH_FINISHED = nil  -- batch key -> finished, looked up once per script call (made on first use)
local function batch_finished(t, batch)
  local bk = batch_key(t, batch)
  if not BATCH_FINISHED then BATCH_FINISHED = {} end
  if BATCH_FINISHED[bk] == nil then BATCH_FINISHED[bk] = redis.call('HEXISTS', bk, BATCH.FINISHED_AT) == 1 end
  return BATCH_FINISHED[bk]
end
local function ix_add(t, dim, value, id, score)
  local k = index_key(t, dim, value)
  zadd(k, score, id)
  if TRIM then TRIM[k] = true else ix_trim(k) end
end
-- A run that ended adds its usage (input, output tokens, estimated '1'/'0', cost USD '' = none, cache
-- read and cache write tokens) to its batch's totals; ``econ``: the economy lane's share of it (the
-- day's usage terms: EconomyUsagePart -> increment, only those not 0), nil = none.
local function batch_usage(bk, u, econ)
  if econ then
    local to = {[EUSAGE.IN] = BATCH.ECONOMY_INPUT_TOKENS, [EUSAGE.OUT] = BATCH.ECONOMY_OUTPUT_TOKENS,
      [EUSAGE.COST] = BATCH.ECONOMY_COST, [EUSAGE.CACHE_READ] = BATCH.ECONOMY_CACHE_READ_TOKENS,
      [EUSAGE.CACHE_WRITE] = BATCH.ECONOMY_CACHE_WRITE_TOKENS}
    for what, n in pairs(econ) do
      if to[what] then redis.call('HINCRBY', bk, to[what], n) end
    end
  end
  local inp, out = tonumber(u[1] or '0') or 0, tonumber(u[2] or '0') or 0
  if inp ~= 0 then redis.call('HINCRBY', bk, BATCH.INPUT_TOKENS, inp) end
  if out ~= 0 then redis.call('HINCRBY', bk, BATCH.OUTPUT_TOKENS, out) end
  if u[3] == '1' then redis.call('HINCRBY', bk, BATCH.ESTIMATED_RUNS, 1) end
  if u[4] and u[4] ~= '' then redis.call('HINCRBYFLOAT', bk, BATCH.COST_USD, u[4]) end
  local cr, cw = tonumber(u[5] or '0') or 0, tonumber(u[6] or '0') or 0
  if cr ~= 0 then redis.call('HINCRBY', bk, BATCH.CACHE_READ_TOKENS, cr) end
  if cw ~= 0 then redis.call('HINCRBY', bk, BATCH.CACHE_WRITE_TOKENS, cw) end
end
-- A run's status changed from old ('' = just created) to new: move it between its tenant's status
-- indexes and its batch's counters. Every script that changes a run's status calls this, in the same
-- call, so the counters are the runs' real statuses. The batch's last run to end marks it finished
-- (batch_settle). ``usage``: the run's usage when the caller writes it in this call (commit.lua),
-- else the run hash's is the one a batch adds when the run ends; ``econ``: its economy lane's share
-- (batch_usage), nil = none.
-- TRACKED: the run hash's fields it reads, in this order (the run's usage only for a batch's run that
-- ends without one given, read then). A caller that read them already in its own HMGET of the run,
-- in this call and with none of them written since, passes that reply and the index of the first of
-- them there (``read``, ``at``): a command fewer.
local TRACKED = {F.TENANT, F.CREATED_AT, F.BATCH, F.CONC_KEY}
local function track(run, id, old, new, usage, econ, read, at)
  old = old or ''
  if old == new then return end
  local h = read or redis.call('HMGET', run, unpack(TRACKED))
  local o = read and at - 1 or 0
  local tenant, batch, conc = h[o + 1], h[o + 3], h[o + 4]
  if not tenant then return end
  -- a run that ends lets go of its concurrency key's slot: the next run waiting for it goes
  if conc and conc ~= '' and is_terminal(new) and not is_terminal(old) then conc_release(tenant, conc, id) end
  -- a run that stops running (or leaves the queue unclaimed) frees its tenant's slot at once
  if old ~= '' and new ~= S.RUNNING and redis.call('ZREM', tenant_running_key(tenant), id) == 1 then
    unhold(tenant, 1)
  end
  if old ~= '' then redis.call('ZREM', index_key(tenant, DIM.STATUS, old), id) end
  ix_add(tenant, DIM.STATUS, new, id, tonumber(h[o + 2] or '0'))
  if not batch or batch == '' then return end
  local bk = batch_key(tenant, batch)
  if redis.call('EXISTS', bk) == 0 then return end
  if old ~= '' then redis.call('HINCRBY', bk, old, -1) end
  redis.call('HINCRBY', bk, new, 1)
  redis.call('EXPIRE', bk, ctx().retention)
  if is_terminal(new) and not is_terminal(old) then
    redis.call('HINCRBY', bk, BATCH.DONE, 1)
    batch_usage(bk, usage or redis.call('HMGET', run, F.USAGE_IN, F.USAGE_OUT, F.USAGE_ESTIMATED, F.USAGE_COST,
      F.USAGE_CACHE_READ, F.USAGE_CACHE_WRITE), econ)
    redis.call('EXPIRE', index_key(tenant, DIM.BATCH, batch), ctx().retention)
    redis.call('EXPIRE', index_key(tenant, DIM.ITEM, batch), ctx().retention)
    batch_settle(bk)
  end
end
-- Put dispatch ``gen`` of a run on its partition's arq queue (the JSON arq's worker reads).
-- ``key``: the job key when the caller declared it in KEYS (else built from the context).
local function enqueue_gen(id, gen, now, key)
  local jid = job_id(id, gen)
  redis.call('SET', key or (ctx().job_key .. jid), job_payload(id, gen, now), 'PX', ctx().job_expire_ms)
  local p = run_priority(id)
  redis.call('ZADD', QUEUE, queue_score(now, p), jid)
  redis.call('HINCRBY', DEPTH, p, 1)
  redis.call('ZADD', LIVE, now + tonumber(ctx().queued_check_ms), id)
  wake()
end
local function enqueue_first(id, now) enqueue_gen(id, 1, now) end
-- A run waiting for client tool results (run field clientPending: the calls, JSON): every call
-- still pending past its deadline gets a timeout error as its result. Returns how many calls are
-- still open and the earliest open deadline (Redis time decides, as for leases).
local function client_settle(run, tools, now)
  local raw = redis.call('HGET', run, F.CLIENT_PENDING)
  if not raw or raw == '' then return 0, 0 end
  local open, earliest = 0, 0
  for _, p in ipairs(cjson.decode(raw)) do
    local rec = redis.call('HGET', tools, p.toolCallId)
    if rec then
      local r = cjson.decode(rec)
      if r.state == TS.CLIENT_PENDING then
        local deadline = tonumber(r.deadlineMs or 0) or 0
        if now >= deadline then
          local msg = 'error: the client returned no result within ' .. tostring(r.timeoutMs or '?') .. ' ms'
          redis.call('HSET', tools, p.toolCallId, cjson.encode({state = TS.DONE, client = true, timedOut = true, calledAt = r.calledAt,
            result = {toolCallId = p.toolCallId, name = r.name, content = msg, isError = true}}))
        else
          open = open + 1
          if earliest == 0 or deadline < earliest then earliest = deadline end
        end
      end
    end
  end
  return open, earliest
end
-- Every client call of a parked run has its result: back on the queue as dispatch gen + 1.
local function client_resume(run, run_id, now)
  local gen = tonumber(redis.call('HGET', run, F.GEN)) + 1
  track(run, run_id, redis.call('HGET', run, F.STATUS), S.QUEUED)
  redis.call('HSET', run, F.GEN, gen, F.STATUS, S.QUEUED, F.OWNER, '')
  enqueue_gen(run_id, gen, now)
end
-- A parked run's answer recorded (a client's tool results, a human's decisions): the first event its
-- resumed run writes (``kind`` about call ``call_id``, ``payload`` as the machine builds it) is
-- written now, at the stream's next seq, with the epoch the run's next acquisition takes, so readers
-- see the answer within its own round trip instead of after a wake, a claim, a restore and a commit.
-- F.ANSWERED names it: the resumed run leaves the machine's own out (worker/runner/opening.py). A
-- worker of a release before that would write the event again. Each worker of this release is in
-- ``answers`` (the partition's answer_workers zset) as it is in WORKERS, with the same lease expiry
-- (beat.lua; forget_worker.lua takes it from both), an earlier one in WORKERS only: while the live
-- counts differ, one of those is live here and the worker writes the event. Two ZCOUNTs: O(log N)
-- in the partition's workers, no command per worker.
local function answer_event(run, stream, answers, kind, call_id, payload)
  local now = now_ms()
  if redis.call('ZCOUNT', WORKERS, now, '+inf') ~= redis.call('ZCOUNT', answers, now, '+inf') then return end
  local h = redis.call('HMGET', run, F.LAST_SEQ, F.EPOCH)
  local seq = int_text(tonumber(h[1] or '0') + 1)
  xadd_text(stream, seq, kind, now, payload, ctx().maxlen, int_text(tonumber(h[2] or '0') + 1))
  redis.call('HSET', run, F.LAST_SEQ, seq, F.ANSWERED, seq .. ':' .. kind .. ':' .. call_id)
end
-- A parent's children of its current round (run field children: [{toolCallId, runId}], JSON): how
-- many have no result in its tools hash yet (each child's ending delivers one: child_result.lua).
local function children_open(run, tools)
  local raw = redis.call('HGET', run, F.CHILDREN)
  if not raw or raw == '' then return 0 end
  local open = 0
  for _, c in ipairs(cjson.decode(raw)) do
    local rec = redis.call('HGET', tools, c.toolCallId)
    if not rec or cjson.decode(rec).state ~= TS.DONE then open = open + 1 end
  end
  return open
end
-- A run ends: what its ending owes other runs, maybe on other partitions, is marked in the run hash
-- (handoff: 'd' its result to its parent, 'a' an abort to its children) and the run put in the
-- live index, due now: shared/children.py does it (the ending worker at once, else the reconciler)
-- and clears the mark. Call after the run left the live index. ``read``: {its parent run, its
-- children} as the caller has them now, nil: read here.
local function ending_handoff(run, run_id, status, read)
  local h = read or redis.call('HMGET', run, F.PARENT_RUN, F.CHILDREN)
  local flags = ''
  if h[1] and h[1] ~= '' then flags = 'd' end
  if status ~= S.COMPLETED and h[2] and h[2] ~= '' and h[2] ~= '[]' and h[2] ~= '{}' then flags = flags .. 'a' end
  if flags == '' then return end
  redis.call('HSET', run, F.HANDOFF, flags)
  redis.call('ZADD', LIVE, now_ms(), run_id)
end
-- The session's active run ended: start the next run waiting on the session, if any.
local function session_advance(sid, finished)
  if not sid or sid == '' then return end
  local skey = session_key(sid)
  if redis.call('HGET', skey, SESSION.ACTIVE_RUN) ~= finished then return end
  while true do
    local nxt = redis.call('LPOP', ctx().session_pending .. sid)
    if not nxt then
      -- Idle: the session is kept for the retention after its latest run ended, as its lists are
      -- (a run submitted to it meanwhile makes it active again and keeps it: submit_one.lua).
      redis.call('HSET', skey, SESSION.ACTIVE_RUN, '')
      redis.call('EXPIRE', skey, ctx().retention)
      return
    end
    if redis.call('HGET', run_key(nxt), F.STATUS) == S.QUEUED then
      redis.call('HSET', skey, SESSION.ACTIVE_RUN, nxt)
      redis.call('HSET', run_key(nxt), F.HELD, '')
      enqueue_first(nxt, now_ms())
      return
    end
  end
end
-- What a session keeps of a run's calls (shared/session_calls.py): its results hash gains their
-- results (``results``: session call id, JSON, …), its calls list their entries (``calls``: JSON, in
-- order; the newest agentmill_client.limits.SESSION_CALLS_KEPT kept), both kept for the retention. A worker's ending passes
-- them (commit.lua); an ending from outside takes them from the run's records (recorded_calls).
local function session_keep(results_key, calls_key, results, calls)
  for k = 1, #results, 1000 do redis.call('HSET', results_key, unpack(results, k, math.min(k + 999, #results))) end
  for k = 1, #calls, 1000 do redis.call('RPUSH', calls_key, unpack(calls, k, math.min(k + 999, #calls))) end
  if #calls > 0 then redis.call('LTRIM', calls_key, -__SESSION_CALLS_KEPT__, -1) end
  redis.call('EXPIRE', results_key, ctx().retention)
  redis.call('EXPIRE', calls_key, ctx().retention)
end
-- The order of the calls a run made: by calledAt, then agentmill's ids c<model call>.<position> by
-- their numbers (c10.0 after c9.1), any other id by its text after them (worker/core/sessions.py call_order).
local CONTEXT_TOOLS = {__CONTEXT_TOOLS__}  -- their calls are no session's calls
local function call_rank(id)
  local head, pos = string.match(id, '^c(%d+)%.(%d+)$')
  if head then return 0, tonumber(head), tonumber(pos) end
  return 1, 0, 0
end
local function call_before(a, b)
  if a.at ~= b.at then return a.at < b.at end
  local ka, ha, pa = call_rank(a.id)
  local kb, hb, pb = call_rank(b.id)
  if ka ~= kb then return ka < kb end
  if ha ~= hb then return ha < hb end
  if pa ~= pb then return pa < pb end
  return a.id < b.id
end
-- The calls a run executed, from its tools hash, as session_keep takes them: each done record but
-- the context tools' (worker/core/sessions.py session_calls does the same for a worker's ending).
local function recorded_calls(tools, run_id)
  local raw = redis.call('HGETALL', tools)
  local done = {}
  for k = 1, #raw, 2 do
    local r = cjson.decode(raw[k + 1])
    local res = r.result
    if r.state == TS.DONE and type(res) == 'table' then
      local name = (type(res.name) == 'string' and res.name ~= '') and res.name or (r.name or '')
      if not CONTEXT_TOOLS[name] then
        res.toolCallId, res.name = raw[k], name
        done[#done + 1] = {id = raw[k], at = tonumber(r.calledAt) or 0, name = name, result = res}
      end
    end
  end
  table.sort(done, call_before)
  local results, calls = {}, {}
  for _, c in ipairs(done) do
    local sid = run_id .. '/' .. c.id  -- the session call id (worker/core/sessions.py session_call_id)
    results[#results + 1] = sid; results[#results + 1] = cjson.encode(c.result)
    calls[#calls + 1] = cjson.encode({[CALL.ID] = sid, [CALL.NAME] = c.name, [CALL.RUN_ID] = run_id,
      [CALL.IS_ERROR] = c.result.isError == true, [CALL.CALLED_AT] = c.at})
  end
  return results, calls
end
-- A run ended: with the archive on (the context's archive_on), it waits in the partition's archive
-- index until an archiver has written it to PostgreSQL (archive_claim.lua, archive_done.lua).
local function to_archive(run_id, now)
  if ctx().archive_on == '1' then redis.call('ZADD', ctx().archive, 'NX', now, run_id) end
end
-- A run ended from outside its worker counts in its tenant's usage as a worker's terminal commit
-- counts it (worker/runner/tally.py): its tokens, cost (nano-USD), cache reads and writes and one run,
-- per agent, on the UTC day it ended (ts: Redis's clock), in the hash of keys.Partition.usage_day on
-- the run's partition.
local function usage_add(run, inp, out, cost, cr, cw, ts)
  local a = redis.call('HMGET', run, F.TENANT, F.AGENT)
  -- the day: days since 1970-01-01 to year, month, day (H. Hinnant's civil_from_days)
  local z = math.floor(ts / 86400000) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local day = string.format('%04d-%02d-%02d', yoe + era * 400 + (m <= 2 and 1 or 0), m,
    doy - math.floor((153 * mp + 2) / 5) + 1)
  local k, f = ctx().usage .. (a[1] or '') .. ':' .. day, (a[2] or '') .. '|'
  local nano = math.floor((tonumber(cost or '') or 0) * __NANO_USD__ + 0.5)
  -- as commit.lua: only what it adds, runs +1; the hash expires usage_ttl after the first run that
  -- wrote a field of it (a field that comes out equal to its increment is new)
  local fresh = false
  for _, p in ipairs({{USAGE.IN, tonumber(inp) or 0}, {USAGE.OUT, tonumber(out or '') or 0}, {USAGE.COST, nano},
      {USAGE.CACHE_READ, tonumber(cr or '') or 0}, {USAGE.CACHE_WRITE, tonumber(cw or '') or 0}, {USAGE.RUNS, 1}}) do
    if p[2] ~= 0 and redis.call('HINCRBY', k, f .. p[1], string.format('%d', p[2])) == p[2] then fresh = true end
  end
  if fresh then redis.call('EXPIRE', k, ctx().usage_ttl) end
end
-- End a run from outside its worker (abort while queued or awaiting approval, crash budget spent,
-- approval timeout). Bumps the epoch so any worker still holding the run is fenced off. The calls its
-- records hold reach its session, as a worker's ending takes them there: once, since only a run not
-- ended yet is ended here, and a worker's later ending of it is fenced.
-- Content that need not be stored (RunInput.storeContent false; its profile's default is resolved
-- into the input at submission): once the run ends, its stream keeps no message or tool content (the
-- payload of each event that carries some keeps its numbers, booleans, ids and names, marked
-- contentRedacted), its result no answer, output or messages, its input no messages; its tool
-- records, checkpoint and transcript go. Usage, timings, statuses and errors stay.
local function stores_no_content(run, said)
  -- said at submission: its input (megabytes) not read. ``said``: the field as its caller read it
  -- (false: not set), nil: read here.
  if said == nil then said = redis.call('HGET', run, F.NO_CONTENT) end
  if said == '1' or said == '0' then return said == '1' end
  local raw = redis.call('HGET', run, F.INPUT)
  if not raw or not string.find(raw, '"storeContent":false', 1, true) then return false end
  local ok, v = pcall(cjson.decode, raw)
  return ok and type(v) == 'table' and v.storeContent == false
end
local CONTENT_KINDS = {[EVENT.MODEL_DELTA] = true, [EVENT.ASSISTANT_MESSAGE] = true, [EVENT.TOOL_CALL] = true,
  [EVENT.TOOL_RESULT] = true, [EVENT.COMPACTION] = true, [EVENT.CHILD_ENDED] = true, [EVENT.APPROVAL] = true}
local KEPT_TEXT = {toolCallId = true, providerCallId = true, name = true, childRunId = true, streamKey = true,
  status = true, finishReason = true, stopReason = true, model = true, code = true, strategy = true, runId = true,
  decision = true}
local USAGES = {usage = true, total = true, childrenUsage = true}  -- tables of numbers: kept
local function scalars_of(t)  -- a table's numbers and booleans (a usage)
  local out = {}
  for k, v in pairs(t) do
    if type(v) == 'number' or type(v) == 'boolean' then out[k] = v end
  end
  return out
end
local function redacted_payload(payload)
  local ok, p = pcall(cjson.decode, payload)
  local out = {contentRedacted = true}
  if not ok or type(p) ~= 'table' then return cjson.encode(out) end
  for k, v in pairs(p) do
    local t = type(v)
    if t == 'number' or t == 'boolean' or (t == 'string' and KEPT_TEXT[k]) then
      out[k] = v
    elseif t == 'table' and USAGES[k] then
      out[k] = scalars_of(v)
    elseif t == 'table' and k == 'actor' then  -- who acted (shared/actors.py): ids, no content
      out[k] = {kind = v.kind, id = v.id, name = v.name}
    end
  end
  return cjson.encode(out)
end
local function redacted_result(raw)
  local ok, r = pcall(cjson.decode, raw)
  if not ok or type(r) ~= 'table' then return cjson.encode({contentRedacted = true}) end
  local out = {contentRedacted = true, runId = r.runId, sessionId = r.sessionId, status = r.status,
    iterations = r.iterations, stopReason = r.stopReason, finishReason = r.finishReason}
  for k in pairs(USAGES) do
    if type(r[k]) == 'table' then out[k] = scalars_of(r[k]) end
  end
  if type(r.lastError) == 'table' then
    out.lastError = {code = r.lastError.code, message = r.lastError.message, retryable = r.lastError.retryable}
  end
  return cjson.encode(out)
end
local function redacted_input(raw)
  local ok, v = pcall(cjson.decode, raw)
  if not ok or type(v) ~= 'table' then return raw end
  local out = {storeContent = false, inputMessages = {{role = 'user', content = ''}}}
  for k, x in pairs(v) do
    local t = type(x)
    if k ~= 'systemPromptOverride' and (t == 'string' or t == 'number' or t == 'boolean') then out[k] = x end
  end
  if type(v.metadata) == 'table' then
    local m = {}
    for k, x in pairs(v.metadata) do
      if type(x) ~= 'table' and type(x) ~= 'userdata' then m[k] = x end
    end
    if next(m) then out.metadata = m end
  end
  return cjson.encode(out)
end
local function redact(run, stream, tools, run_id)
  local entries = redis.call('XRANGE', stream, '-', '+')
  local rows, changed = {}, false
  for _, e in ipairs(entries) do
    local f = {}
    for k = 1, #e[2], 2 do f[e[2][k]] = e[2][k + 1] end
    if CONTENT_KINDS[f.kind] then f.payload = redacted_payload(f.payload); changed = true end
    rows[#rows + 1] = {e[1], f}  -- its id is <seq>-0 (xadd)
  end
  if changed then
    redis.call('DEL', stream)
    for _, r in ipairs(rows) do
      local f = r[2]
      xadd(stream, tonumber(f.seq), f.kind, f.ts, f.payload, ctx().maxlen, f.epoch)
    end
  end
  local h = redis.call('HMGET', run, F.RESULT, F.INPUT)
  local set = {}
  if h[1] then set[#set + 1] = F.RESULT; set[#set + 1] = redacted_result(h[1]) end
  if h[2] then set[#set + 1] = F.INPUT; set[#set + 1] = redacted_input(h[2]) end
  if #set > 0 then redis.call('HSET', run, unpack(set)) end
  redis.call('HDEL', run, F.CKPT, F.LOOP, F.APPROVALS, F.CLIENT_PENDING, F.ORIGIN)
  redis.call('DEL', tools, transcript_key(run_id))
end
-- ``actor`` (optional): who ended it, its JSON (shared/actors.py), named in the status event.
local function finalize(run, stream, tools, run_id, status, code, message, actor)
  local maxlen, retention = ctx().maxlen, ctx().retention
  flush_deferred()  -- a run created earlier in this script may be the one ending
  local h = redis.call('HMGET', run, F.LAST_SEQ, F.SESSION_ID, F.ITERATIONS, F.EPOCH, F.STATUS, F.USAGE_IN,
    F.USAGE_OUT, F.USAGE_ESTIMATED, F.USAGE_COST, F.USAGE_CACHE_READ, F.USAGE_CACHE_WRITE)
  local seq = tonumber(h[1] or '0') + 1
  local iterations = tonumber(h[3] or '0')
  local err = {code = code, message = message, retryable = false}
  local result = {runId = run_id, status = status, iterations = iterations, lastError = err}
  if h[2] and h[2] ~= '' then result.sessionId = h[2] end
  if h[6] then  -- what it spent before it was ended
    result.usage = {inputTokens = tonumber(h[6]), outputTokens = tonumber(h[7] or '0'), estimated = h[8] == '1',
      costUsd = tonumber(h[9] or ''), cacheReadTokens = tonumber(h[10] or '0') or 0,
      cacheWriteTokens = tonumber(h[11] or '0') or 0}
  end
  local ts = now_ms()
  -- a run that started (a worker's commit wrote its usage) counts in the usage report, once
  if h[6] and not is_terminal(h[5]) then usage_add(run, h[6], h[7], h[9], h[10], h[11], ts) end
  leave_worker(run, run_id)
  if status == S.FAILED then  -- the machine's order: the run's error event, then its status
    xadd(stream, seq, EVENT.ERROR, ts, cjson.encode({scope = 'run', code = code, message = message, retryable = false}),
      maxlen, tonumber(h[4] or '0') + 1)
    seq = seq + 1
  end
  local said = {status = status, iterations = iterations, error = err}
  if actor and actor ~= '' then said.actor = cjson.decode(actor) end
  xadd(stream, seq, EVENT.STATUS, ts, cjson.encode(said), maxlen, tonumber(h[4] or '0') + 1)
  redis.call('HSET', run, F.STATUS, status, F.RESULT, cjson.encode(result), F.LAST_SEQ, seq,
    F.OWNER, '', F.EPOCH, tonumber(h[4] or '0') + 1, F.FINISHED_AT, ts, F.ABORT, '', F.ERROR_CODE, code)
  redis.call('ZREM', LIVE, run_id)
  redis.call('ZREM', AWAITING, run_id)
  ending_handoff(run, run_id, status)
  track(run, run_id, h[5], status)
  local wh = redis.call('HGET', run, F.WEBHOOK)
  if wh and wh ~= '' then redis.call('LPUSH', WEBHOOKS, run_id) end
  local no_content = stores_no_content(run)
  if h[2] and h[2] ~= '' then
    local results, calls = recorded_calls(tools, run_id)
    session_keep(ctx().session_results .. h[2], ctx().session_calls .. h[2], no_content and {} or results, calls)
  end
  if no_content then redact(run, stream, tools, run_id) end
  session_advance(h[2], run_id)
  to_archive(run_id, ts)
  redis.call('EXPIRE', run, retention)
  redis.call('EXPIRE', stream, retention)
  redis.call('EXPIRE', tools, retention)
  redis.call('EXPIRE', transcript_key(run_id), retention)
  return seq
end
-- The run's worker was lost while running it (its lease expired: crashed, killed, OOM, or its loop
-- blocked; a graceful hand-back releases the run instead and never gets here): count the lost
-- attempt in the run hash and free the run of that worker. The run that has lost its worker
-- ctx().max_run_crashes times is a poison run: it ends failed instead of moving to the next worker.
-- Returns the count and whether the run ended.
local function worker_lost(run, stream, tools, run_id, owner)
  redis.call('SREM', worker_runs_key(owner), run_id)
  redis.call('HSET', run, F.OWNER, '')
  local n = redis.call('HINCRBY', run, F.CRASHES, 1)
  local max = tonumber(ctx().max_run_crashes)
  if n < max then return n, false end
  finalize(run, stream, tools, run_id, S.FAILED, 'poison_run',
    'the run lost its worker ' .. n .. ' times (a crash, kill or lease loss each time; AGENTMILL_MAX_RUN_CRASHES=' ..
    max .. '): quarantined instead of handed to another worker')
  return n, true
end
-- A run awaiting approval past its approval timeout or its maxRunDurationMs (whichever came first):
-- the lastError code and message it ends with, or nil, nil and when the wait ends (nil: never).
local function approval_expired(run, now)
  local h = redis.call('HMGET', run, F.AWAITING_SINCE, F.APPROVAL_TIMEOUT_MS, F.RUN_DEADLINE_MS)
  local timeout = tonumber(h[2] or '') or 0
  local approval_at = timeout > 0 and (tonumber(h[1] or '0') or 0) + timeout or nil
  local run_at = tonumber(h[3] or '')
  if run_at and now >= run_at and (not approval_at or run_at <= approval_at) then
    return 'max_run_duration', 'loopLimits.maxRunDurationMs reached while awaiting approval'
  end
  if approval_at and now >= approval_at then
    return 'approval_timeout', 'no approval decision within ' .. timeout .. ' ms'
  end
  if run_at and (not approval_at or run_at < approval_at) then return nil, nil, run_at end
  return nil, nil, approval_at
end
-- The start of every call: the partition's keys and context off KEYS and ARGV, the per-call state reset.
local function enter_prelude(KEYS, ARGV)
  -- taken off the end, by index: no call of table.remove, and no argument moved
  local na = #ARGV
  CTX_RAW = ARGV[na]; ARGV[na] = nil
  CTX = CTX_OF[CTX_RAW]
  local fixed = FIXED_OF[CTX_RAW]
  if fixed then  -- a token sent without the fixed keys
    QUEUE, LIVE, AWAITING, WORKERS = fixed[1], fixed[2], fixed[3], fixed[4]
    WEBHOOKS, SCHEDULED, DEPTH, WAKE = fixed[5], fixed[6], fixed[7], fixed[8]
  else
    -- a token the library was not told (a token is a few bytes, a context hundreds): nothing done,
    -- the caller tells it
    if not CTX and #CTX_RAW < 64 then
      error({err = 'NOCONTEXT the library does not know this context token (shared.functions)'})
    end
    local nk = #KEYS
    QUEUE, LIVE, AWAITING, WORKERS = KEYS[nk - 7], KEYS[nk - 6], KEYS[nk - 5], KEYS[nk - 4]
    WEBHOOKS, SCHEDULED, DEPTH, WAKE = KEYS[nk - 3], KEYS[nk - 2], KEYS[nk - 1], KEYS[nk]
    for k = nk, nk - 7, -1 do KEYS[k] = nil end
  end
  WAKES = 0
  DEFERRED, TRIM, BATCH_NEW, BATCH_FINISHED = nil, nil, nil, nil
end
