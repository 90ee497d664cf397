-- One step's fenced write: its events, tool claims and records, checkpoint, and what else of the run
-- it changed. Call: shared.calls.steps.Commit (its fields say what each argument is; a commit sends
-- its tail up to the last field it needs: a step's usual commits the first few or none).
-- KEYS after the run's: with a session update the session's six
-- (shared.keys.Partition.session_keys); with a terminal status and a usage tally the tenant's usage
-- hash of the day (keys.Partition.usage_day), then with a settlement the tenant's day budget hash and
-- holds zset (budget.lua, in this run's slot): those last ones found from the end of KEYS.
-- The usage: kept as fields so GET shows it while running and a batch sums it; with a terminal
-- status the run's usage is added to its tenant's usage hash of the day (the usage terms).
-- The run's status and webhook only when this commit changes its status: each field of a script's
-- reply costs Lua about as much as a small command.
-- A commit that changes the status reads in the same HMGET what its ending reads of the run (whether
-- it stores no content, its parent and children, and track's fields from index 10: TRACKED): one
-- read of the run hash, not four.
local h
if ARG.STATUS == '' then
  h = redis.call('HMGET', KEY.RUN, F.EPOCH, F.LAST_SEQ, F.OWNER, F.CLAIMS)
else
  h = redis.call('HMGET', KEY.RUN, F.EPOCH, F.LAST_SEQ, F.OWNER, F.CLAIMS, F.STATUS, F.WEBHOOK, F.NO_CONTENT,
    F.PARENT_RUN, F.CHILDREN, unpack(TRACKED))
end
local first = num(ARG.FIRST_SEQ)
local epoch = ARG.EPOCH
-- The run's stream and tools hash and the worker's lease: built here from the run id and the lease id
-- (keys.Partition's prefixes, as transcript_key is), not sent as KEYS: three keys fewer a commit to
-- parse and copy into Lua, in the run's slot as its hash is.
local run_id = ARG.RUN_ID
local refused = append_refused(h, epoch, ARG.LEASE_ID, nil, nil, first, ARGV, ARGN.SECTIONS - 1, run_id)
-- A transcript from LARGE_BYTES on comes staged: written by a plain SET just before this call (in its
-- round trip), renamed into place below, so its megabytes never pass through Lua. Its key is in the
-- tail, after the sections (TAIL: their end).
if refused then
  if ARG.TRANSCRIPT_MODE == 's' then
    local TAIL = ARGN.SECTIONS - 1 + 2 * num(ARG.N_EVENTS) + 2 * num(ARG.N_CLAIMS) + 2 * num(ARG.N_RECORDS)
    if ARG.TRANSCRIPT_STAGED ~= '' then redis.call('DEL', ARG.TRANSCRIPT_STAGED) end
  end
  return refused
end
-- The sections: the events (kind, payload each; ARG.TS their time), then the tool claims (pending, with the attempt number the worker
-- counted from the records it acquired), then the tool records (results, offered client calls).
-- The tail (shared.calls.base.TAIL: what only some commits send) after them; its fields read as
-- their defaults when a commit stops before them.
local n = num(ARG.N_EVENTS)
local nc = num(ARG.N_CLAIMS)
local nr = num(ARG.N_RECORDS)
local TOOLS = (nr > 0 or ARG.STATUS ~= '') and tools_key(run_id) or nil  -- (only its records and a status use it)
local claims_at = ARGN.SECTIONS + 2 * n
local records_at = claims_at + 2 * nc
local TAIL = records_at + 2 * nr - 1
local staged = ARG.TRANSCRIPT_STAGED
if staged ~= '' and redis.call('EXISTS', staged) == 0 then  -- before any write: nothing half made
  return redis.error_reply('ERR the staged transcript of run ' .. ARG.RUN_ID .. ' expired before its commit')
end
local STREAM = stream_key(run_id)
local _, last_text = append_events(STREAM, first, ARG.FIRST_SEQ, n, ARGV, ARGN.SECTIONS, epoch, ARG.TS)
last_text = last_text or int_text(first - 1)
-- The claims: the run's open claims (field claims) gain them, in the run hash's HSET below, so a
-- step that claims writes one hash. The records: one HSET of the tools hash; a record supersedes
-- its call's claim, which leaves the open claims.
local open = h[4] or ''
-- A step's two usual commits change the claims without a JSON round trip: its claims when none is
-- open (their text written here), then the records that close its one open claim ('').
-- claims_text: the field's new text; nil with claims nil: unchanged.
local claims, claims_text = nil, nil
local fast = false
if nc > 0 and nr == 0 and open == '' and plain_int(epoch) then
  -- each claim's text made whole in one concatenation, the braces around them included: every Lua
  -- string made is hashed byte by byte, so a step's one claim is one string, not three
  local parts, last = {}, claims_at + 2 * nc - 2
  for k = claims_at, last, 2 do
    if not (plain_id(ARGV[k]) and plain_int(ARGV[k + 1])) then parts = nil; break end
    parts[#parts + 1] = (k == claims_at and '{"' or '"') .. ARGV[k] .. '":{"state":"' .. TS.PENDING .. '","epoch":' ..
      epoch .. ',"attempts":' .. ARGV[k + 1] .. (k == last and '}}' or '}')
  end
  if parts then claims_text, fast = nc == 1 and parts[1] or table.concat(parts, ','), true end
elseif nc == 0 and nr > 0 and open ~= '' then
  local only = string.match(open, '^{"([%w%._:%-]+)":{[^{}]*}}$')
  if only then
    fast = true
    for k = records_at, records_at + 2 * nr - 1, 2 do
      if ARGV[k] == only then claims_text = ''; break end
    end
  end
end
if not fast then
  -- any other change: the open claims decoded, changed, encoded again
  local function open_claims()
    if not claims then claims = open ~= '' and cjson.decode(open) or {} end
    return claims
  end
  for k = claims_at, claims_at + 2 * nc - 1, 2 do
    open_claims()[ARGV[k]] = {state = TS.PENDING, epoch = tonumber(epoch), attempts = tonumber(ARGV[k + 1])}
  end
  for k = records_at, records_at + 2 * nr - 1, 2 do
    if claims or open ~= '' then open_claims()[ARGV[k]] = nil end
  end
end
-- (straight from ARGV, CHUNK arguments a call at most: unpack's limit)
local records_end = records_at + 2 * nr - 1
for k = records_at, records_end, CHUNK do
  redis.call('HSET', TOOLS, unpack(ARGV, k, math.min(k + CHUNK - 1, records_end)))
end
local iterations = ARG.ITERATIONS
local usage = nil
if ARG.USAGE_IN ~= '' then
  usage = {ARG.USAGE_IN, ARG.USAGE_OUT, ARG.USAGE_ESTIMATED, ARG.USAGE_COST, ARG.USAGE_CACHE_READ,
    ARG.USAGE_CACHE_WRITE}
end
-- The transcript when checkpoints leave it out: 'a' appends its new messages' JSON (a leading comma
-- unless the first), 's' sets it whole (the machine replaced it: compaction, a fork; an attempt's
-- first commit), '' leaves it.
local tr_mode, tr = ARG.TRANSCRIPT_MODE, ARG.TRANSCRIPT
-- The tail's later fields, read only when the commit sent one of them (else each is its default).
local children, config = '', ''
if ARGV[ARGN.CHILDREN] then children, config = ARG.CHILDREN, ARG.CONFIG end
local sid, loop, approval_timeout, run_deadline, error_code, usage_ttl = '', '', '', '', '', ''
local settle, trs, calls, usage_at, nu = false, NONE, NONE, 0, 0
if ARGV[ARGN.AUX] then
  sid, loop = ARG.SESSION_ID, ARG.LOOP
  approval_timeout, run_deadline = ARG.APPROVAL_TIMEOUT_MS, ARG.RUN_DEADLINE_MS
  error_code, usage_ttl = ARG.ERROR_CODE, ARG.USAGE_TTL
  settle = ARG.SETTLE_MEMBER ~= ''
  local i = ARGN.TAIL_SECTIONS
  local ntr = num(ARG.N_RESULTS)
  if ntr > 0 then
    trs = {}
    for k = i, i + 2 * ntr - 1 do trs[#trs + 1] = ARGV[k] end
    i = i + 2 * ntr
  end
  local ncalls = num(ARG.N_CALLS)
  if ncalls > 0 then
    calls = {}
    for k = 1, ncalls do calls[k] = ARGV[i]; i = i + 1 end
  end
  usage_at, nu = i, num(ARG.N_USAGE)
end
local usage_key = KEYS[#KEYS - (settle and 2 or 0)]
-- The run hash's fields this commit changes, in one HSET at the end.
local run_fields = {}
local function set(k, v) run_fields[#run_fields + 1] = k; run_fields[#run_fields + 1] = v end
if n > 0 then set(F.LAST_SEQ, last_text) end
if ARG.CKPT ~= '' then set(F.CKPT, ARG.CKPT) end
if config ~= '' then set(F.CONFIG, config) end
if tr_mode == 'a' then
  redis.call('APPEND', transcript_key(run_id), tr)
elseif tr_mode == 's' and staged ~= '' then
  redis.call('RENAME', staged, transcript_key(run_id))
  redis.call('PERSIST', transcript_key(run_id))
elseif tr_mode == 's' then
  redis.call('SET', transcript_key(run_id), tr)
end
if claims then claims_text = next(claims) and cjson.encode(claims) or '' end
if claims_text then set(F.CLAIMS, claims_text) end
if iterations ~= '' then set(F.ITERATIONS, iterations) end
if children ~= '' then set(F.CHILDREN, children) end
if usage then
  set(F.USAGE_IN, usage[1]); set(F.USAGE_OUT, usage[2]); set(F.USAGE_ESTIMATED, usage[3])
  if usage[4] ~= '' then set(F.USAGE_COST, usage[4]) end
  -- (a run's usage only grows: a count still 0 is sent as none, never written)
  if usage[5] ~= '' then set(F.USAGE_CACHE_READ, usage[5]) end
  if usage[6] ~= '' then set(F.USAGE_CACHE_WRITE, usage[6]) end
end
local status = ARG.STATUS
local now = status ~= '' and now_ms() or 0
-- The economy lane's share of an ending run's usage: the day's usage terms ``<agent>|e.*``, which
-- usage_tally puts just before the last term (a run without them costs one string match). Kept on
-- the run hash (the archive's copy of the run) and added to its batch's economy counters.
local econ = nil
if nu > 1 and status ~= '' and usage_ttl ~= '' then
  for k = usage_at + 2 * (nu - 2), usage_at, -2 do
    local what = string.match(ARGV[k], '|(e%.%a+)$')
    if not what then break end
    econ = econ or {}
    econ[what] = ARGV[k + 1]
  end
  if econ then
    local runf = {[EUSAGE.IN] = F.ECONOMY_IN, [EUSAGE.OUT] = F.ECONOMY_OUT, [EUSAGE.COST] = F.ECONOMY_COST,
      [EUSAGE.CACHE_READ] = F.ECONOMY_CACHE_READ, [EUSAGE.CACHE_WRITE] = F.ECONOMY_CACHE_WRITE}
    for what, n in pairs(econ) do
      if runf[what] then set(runf[what], n) end
    end
  end
end
if status ~= '' then
  local owner = h[3]
  if owner and owner ~= '' then redis.call('SREM', worker_runs_key(owner), run_id) end
  track(KEY.RUN, run_id, h[5], status, usage, econ, h, 10)
  set(F.STATUS, status); set(F.OWNER, '')
end
if status == '' then
  -- still running: its worker's lease covers it
elseif is_terminal(status) then
  set(F.RESULT, ARG.AUX); set(F.FINISHED_AT, now)
  if error_code ~= '' then set(F.ERROR_CODE, error_code) end
  redis.call('ZREM', LIVE, run_id)
  redis.call('ZREM', AWAITING, run_id)
  if h[6] and h[6] ~= '' then redis.call('LPUSH', WEBHOOKS, run_id) end
  if usage_ttl ~= '' then
    -- The day's hash expires usage_ttl after the first run that wrote a field of it (a field that
    -- comes out equal to its increment is new: the runs field, +1 a run, is new once a day and agent).
    local fresh = false
    for k = usage_at, usage_at + 2 * nu - 1, 2 do
      if redis.call('HINCRBY', usage_key, ARGV[k], ARGV[k + 1]) == tonumber(ARGV[k + 1]) then fresh = true end
    end
    if fresh then redis.call('EXPIRE', usage_key, usage_ttl) end
  end
  redis.call('HSET', KEY.RUN, unpack(run_fields)); run_fields = {}
  local no_content = stores_no_content(KEY.RUN, h[7])
  if no_content then redact(KEY.RUN, STREAM, TOOLS, run_id) end
  ending_handoff(KEY.RUN, run_id, status, {h[8], children ~= '' and children or h[9]})
  if sid ~= '' then
    if loop ~= '' and not no_content then
      redis.call('RPUSH', KEY.SESSION_LOOPS, loop)
      redis.call('LTRIM', KEY.SESSION_LOOPS, -__SESSION_LOOPS_KEPT__, -1)
      -- kept with the run until archived: the archive answers the session's history after its list expired
      if ctx().archive_on == '1' then redis.call('HSET', KEY.RUN, F.LOOP, loop) end
    end
    session_keep(KEY.SESSION_RESULTS, KEY.SESSION_CALLS, no_content and {} or trs, calls)
    -- A session's history lives for the retention after its latest run ended.
    redis.call('LTRIM', KEY.SESSION_RUNS, -__SESSION_RUNS_SHOWN__, -1)
    redis.call('EXPIRE', KEY.SESSION_RUNS, ctx().retention)
    redis.call('EXPIRE', KEY.SESSION_LOOPS, ctx().retention)
    session_advance(sid, run_id)
  end
  to_archive(run_id, now)
  redis.call('EXPIRE', KEY.RUN, ctx().retention)
  redis.call('EXPIRE', STREAM, ctx().retention)
  redis.call('EXPIRE', TOOLS, ctx().retention)
  redis.call('EXPIRE', transcript_key(run_id), ctx().retention)
  -- arq's finish of the run's job (worker/process/finisher.py's writes), with its ending: a round trip fewer
  if ARG.JOB ~= '' then
    redis.call('DEL', ctx().job_progress .. ARG.JOB, ctx().job_key .. ARG.JOB)
    if ARG.JOB_RESULT ~= '' then
      redis.call('SET', ctx().job_result .. ARG.JOB, ARG.JOB_RESULT, 'PX', ARG.JOB_RESULT_MS)
    end
  end
elseif status == S.AWAITING_HUMAN then
  set(F.APPROVALS, ARG.AUX); set(F.AWAITING_SINCE, now)
  set(F.APPROVAL_TIMEOUT_MS, approval_timeout); set(F.RUN_DEADLINE_MS, run_deadline)
  redis.call('ZADD', AWAITING, now, run_id)
  -- the reconciler ends the wait at the approval timeout or the run's deadline, whichever is first
  local due = nil
  if approval_timeout ~= '' then due = now + tonumber(approval_timeout) end
  if run_deadline ~= '' and (not due or tonumber(run_deadline) < due) then due = tonumber(run_deadline) end
  if due then
    redis.call('ZADD', LIVE, due, run_id)
  else
    redis.call('ZREM', LIVE, run_id)
  end
elseif status == S.AWAITING_TOOLS then
  -- aux: the pending client calls. Parked on no worker until each has a result or times out.
  set(F.CLIENT_PENDING, ARG.AUX); set(F.AWAITING_SINCE, now)
  redis.call('HSET', KEY.RUN, unpack(run_fields)); run_fields = {}
  local open, earliest = client_settle(KEY.RUN, TOOLS, now)
  if open == 0 then
    client_resume(KEY.RUN, run_id, now)
  else
    redis.call('ZADD', LIVE, earliest, run_id)
  end
elseif status == S.AWAITING_MODEL then
  -- aux: the model call in a provider batch ({customId, index, switchAt}). Parked on no worker
  -- until its answer is with the run (model_reply.lua resumes it; at once if it came before this
  -- commit), or its switch time comes (redispatch.lua sends the call to the standard lane).
  local w = cjson.decode(ARG.AUX)
  local index = tostring(w.index)
  local switch = ''
  if type(w.switchAt) == 'number' then switch = string.format('%d', w.switchAt) end
  set(F.MODEL_AWAITED, index); set(F.MODEL_SWITCH_AT, switch); set(F.AWAITING_SINCE, now)
  set(F.MODEL_WAIT, ARG.AUX)
  redis.call('HSET', KEY.RUN, unpack(run_fields)); run_fields = {}
  if redis.call('HGET', KEY.RUN, F.MODEL_REPLY_INDEX) == index then
    client_resume(KEY.RUN, run_id, now)
  elseif switch ~= '' then
    redis.call('ZADD', LIVE, tonumber(switch), run_id)
  else
    redis.call('ZREM', LIVE, run_id)
  end
elseif status == S.AWAITING_CHILDREN then
  -- Parked on no worker until every child of the round has delivered its result (child_result.lua
  -- resumes it then; at once if they all ended before this commit). The reconciler looks again at
  -- the run's deadline (maxRunDurationMs), or after the queued-run check, whichever is first.
  set(F.AWAITING_SINCE, now); set(F.RUN_DEADLINE_MS, run_deadline)
  redis.call('HSET', KEY.RUN, unpack(run_fields)); run_fields = {}
  if children_open(KEY.RUN, TOOLS) == 0 then
    client_resume(KEY.RUN, run_id, now)
  else
    local due = now + tonumber(ctx().queued_check_ms)
    if run_deadline ~= '' and tonumber(run_deadline) < due then due = tonumber(run_deadline) end
    redis.call('ZADD', LIVE, due, run_id)
  end
end
if #run_fields > 0 then redis.call('HSET', KEY.RUN, unpack(run_fields)) end
if settle then
  budget_settle(KEYS[#KEYS - 1], KEYS[#KEYS], ARG.SETTLE_MEMBER, ARG.SETTLE_TOKENS, ARG.SETTLE_NANO_USD,
    ARG.SETTLE_TTL_MS)
end
return {V.OK, last_text}
