-- KEYS: run, stream, tools, the committing worker's lease key, then with a session update: the
--   session's hash, pending, runs, loops, results, calls (shared.keys.Partition.session_keys)
-- ARGV: [1] epoch [2] firstSeq [3] the worker's lease id [4] runId [5] status ('' = still running)
--   [6] aux (result JSON when terminal, approvals JSON when awaiting_human) [7] ckpt ('' = unchanged)
--   [8] nEvents, then kind, ts, payload per event; nClaims, then id, attempt number per
--   claim; nRecords, id, json;
--   sessionId, run loop JSON ('' = none), nToolResults, id, json; nCalls, json (the run's calls, in
--   order, for the session's list of calls); approvalTimeoutMs ('' = none),
--   run deadline ms (maxRunDurationMs from the start; '' = none; bounds an approval wait too),
--   iterations ('' = unchanged; kept as a field so scripts that end a run report it without
--   parsing the checkpoint), the ending's error code ('' = none; a field, for listings), the
--   children of the current tool round ('' = unchanged; JSON [{toolCallId, runId}]: sub-agents),
--   the run's usage so far when it changed: input tokens ('' = unchanged), output tokens, estimated
--   ('1'/'0'), cost USD ('' = none), cache read tokens, cache write tokens; kept as fields so GET
--   shows it while running and a batch sums it;
--   the run's configuration JSON ('' = unchanged; checkpoints written without it: F.CONFIG);
--   the transcript's mode ('' = unchanged, 'a' = append, 's' = set) and bytes (checkpoints written
--   without it: the key transcript_key(runId));
--   the usage tally's ttl s ('' = none), nUsage, then field, increment per field: with a terminal
--   status, the run's usage added to its tenant's usage hash of the day (keys.Partition.usage_day,
--   in KEYS after the session's), then a budget settlement: the hold's member ('' = none), actual
--   tokens, actual nano-USD, keys' ttl ms (budget.lua; the tenant's day budget hash and holds zset
--   last in KEYS, in this run's slot).
-- The run's status and webhook only when this commit changes its status: each field of a script's
-- reply costs Lua about as much as a small command.
local h
if ARGV[5] == '' then
  h = redis.call('HMGET', KEYS[1], F.EPOCH, F.LAST_SEQ, F.OWNER, F.CLAIMS)
else
  h = redis.call('HMGET', KEYS[1], F.EPOCH, F.LAST_SEQ, F.OWNER, F.CLAIMS, F.STATUS, F.WEBHOOK)
end
local first = num(ARGV[2])
local refused = append_refused(h, ARGV[1], ARGV[3], KEYS[4], KEYS[2], first, ARGV, 8)
if refused then return refused end
local n = num(ARGV[8])
local i = append_events(KEYS[2], first, n, ARGV, 9, ARGV[1])
local last = first + n - 1
local last_text = int_text(last)
-- Tool claims (pending, with the attempt number the worker counted from the records it acquired):
-- the run's open claims (field claims) gain them, in the run hash's HSET below, so a step that
-- claims writes one hash. Tool records (results, offered client calls): one HSET of the tools hash;
-- a record supersedes its call's claim, which leaves the open claims.
local nc = num(ARGV[i]); i = i + 1
local claims_at = i
i = i + 2 * nc
local nr = num(ARGV[i]); i = i + 1
local records_at = i
i = i + 2 * nr
local open = h[4] or ''
-- A step's two usual commits change the claims without a JSON round trip: its claims when none is
-- open (their text written here), then the records that close its one open claim ('').
-- claims_text: the field's new text; nil with claims nil: unchanged.
local claims, claims_text = nil, nil
local function plain_int(s) return #s < 15 and string.find(s, '^[1-9]%d*$') ~= nil end
local function plain_id(s) return string.find(s, '^[%w%._:%-]+$') ~= nil end
local fast = false
if nc > 0 and nr == 0 and open == '' and plain_int(ARGV[1]) then
  local parts = {}
  for k = claims_at, claims_at + 2 * nc - 1, 2 do
    if not (plain_id(ARGV[k]) and plain_int(ARGV[k + 1])) then parts = nil; break end
    parts[#parts + 1] = '"' .. ARGV[k] .. '":{"state":"' .. TS.PENDING .. '","epoch":' .. ARGV[1] .. ',"attempts":' ..
      ARGV[k + 1] .. '}'
  end
  if parts then claims_text, fast = '{' .. table.concat(parts, ',') .. '}', true end
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
    open_claims()[ARGV[k]] = {state = TS.PENDING, epoch = tonumber(ARGV[1]), attempts = tonumber(ARGV[k + 1])}
  end
  for k = records_at, records_at + 2 * nr - 1, 2 do
    if claims or open ~= '' then open_claims()[ARGV[k]] = nil end
  end
end
local tool_fields = {}
for k = records_at, records_at + 2 * nr - 1, 2 do
  tool_fields[#tool_fields + 1] = ARGV[k]; tool_fields[#tool_fields + 1] = ARGV[k + 1]
end
if #tool_fields > 0 then redis.call('HSET', KEYS[3], unpack(tool_fields)) end
local sid = ARGV[i]; local loop = ARGV[i + 1]; i = i + 2
local ntr = num(ARGV[i]); i = i + 1
local trs = {}
for k = 1, ntr do
  trs[#trs + 1] = ARGV[i]; trs[#trs + 1] = ARGV[i + 1]
  i = i + 2
end
local ncalls = num(ARGV[i]); i = i + 1
local calls = {}
for k = 1, ncalls do calls[k] = ARGV[i]; i = i + 1 end
local approval_timeout = ARGV[i]
local run_deadline = ARGV[i + 1] or ''
local iterations = ARGV[i + 2] or ''
local error_code = ARGV[i + 3] or ''
local children = ARGV[i + 4] or ''
local usage = nil
if (ARGV[i + 5] or '') ~= '' then
  usage = {ARGV[i + 5], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8], ARGV[i + 9], ARGV[i + 10]}
end
i = i + 2  -- the usage's two cache counts: what follows keeps its offsets
local config = ARGV[i + 9] or ''
-- The transcript when checkpoints leave it out: 'a' appends its new messages' JSON (a leading comma
-- unless the first), 's' sets it whole (the machine replaced it: compaction, a fork; an attempt's
-- first commit), '' leaves it.
local tr_mode, tr = ARGV[i + 10] or '', ARGV[i + 11] or ''
i = i + 3  -- the usage tally and the settlement come after the configuration and the transcript
local usage_ttl = ARGV[i + 9] or ''
local nu = num(ARGV[i + 10] or '0')
local settle_at = i + 11 + 2 * nu
local settle = (ARGV[settle_at] or '') ~= ''
local usage_key = KEYS[#KEYS - (settle and 2 or 0)]
-- The run hash's fields this commit changes, in one HSET at the end.
local run_fields = {}
local function set(k, v) run_fields[#run_fields + 1] = k; run_fields[#run_fields + 1] = v end
if n > 0 then set(F.LAST_SEQ, last_text) end
if ARGV[7] ~= '' then set(F.CKPT, ARGV[7]) end
if config ~= '' then set(F.CONFIG, config) end
if tr_mode == 'a' then
  redis.call('APPEND', transcript_key(ARGV[4]), tr)
elseif tr_mode == 's' then
  redis.call('SET', transcript_key(ARGV[4]), tr)
end
if claims then claims_text = next(claims) and cjson.encode(claims) or '' end
if claims_text then set(F.CLAIMS, claims_text) end
if iterations ~= '' then set(F.ITERATIONS, iterations) end
if children ~= '' then set(F.CHILDREN, children) end
if usage then
  set(F.USAGE_IN, usage[1]); set(F.USAGE_OUT, usage[2]); set(F.USAGE_ESTIMATED, usage[3])
  if usage[4] ~= '' then set(F.USAGE_COST, usage[4]) end
  -- (a run's usage only grows: a count still 0 was never written)
  if (usage[5] or '0') ~= '0' then set(F.USAGE_CACHE_READ, usage[5]) end
  if (usage[6] or '0') ~= '0' then set(F.USAGE_CACHE_WRITE, usage[6]) end
end
local status = ARGV[5]
local now = status ~= '' and now_ms() or 0
if status ~= '' then
  local owner = h[3]
  if owner and owner ~= '' then redis.call('SREM', worker_runs_key(owner), ARGV[4]) end
  track(KEYS[1], ARGV[4], h[5], status, usage)
  set(F.STATUS, status); set(F.OWNER, '')
end
if status == '' then
  -- still running: its worker's lease covers it
elseif is_terminal(status) then
  set(F.RESULT, ARGV[6]); set(F.FINISHED_AT, now)
  if error_code ~= '' then set(F.ERROR_CODE, error_code) end
  redis.call('ZREM', LIVE, ARGV[4])
  redis.call('ZREM', AWAITING, ARGV[4])
  if h[6] and h[6] ~= '' then redis.call('LPUSH', WEBHOOKS, ARGV[4]) end
  if usage_ttl ~= '' then
    -- The day's hash expires usage_ttl after the first run that wrote a field of it (a field that
    -- comes out equal to its increment is new: the runs field, +1 a run, is new once a day and agent).
    local fresh = false
    for k = i + 11, i + 10 + 2 * nu, 2 do
      if redis.call('HINCRBY', usage_key, ARGV[k], ARGV[k + 1]) == tonumber(ARGV[k + 1]) then fresh = true end
    end
    if fresh then redis.call('EXPIRE', usage_key, usage_ttl) end
  end
  redis.call('HSET', KEYS[1], unpack(run_fields)); run_fields = {}
  local no_content = stores_no_content(KEYS[1])
  if no_content then redact(KEYS[1], KEYS[2], KEYS[3], ARGV[4]) end
  ending_handoff(KEYS[1], ARGV[4], status)
  if sid ~= '' then
    if loop ~= '' and not no_content then
      redis.call('RPUSH', KEYS[8], loop)
      redis.call('LTRIM', KEYS[8], -1000, -1)
      -- kept with the run until archived: the archive answers the session's history after its list expired
      if ctx().archive_on == '1' then redis.call('HSET', KEYS[1], F.LOOP, loop) end
    end
    session_keep(KEYS[9], KEYS[10], no_content and {} or trs, calls)
    -- A session's history lives for the retention after its latest run ended.
    redis.call('LTRIM', KEYS[7], -1000, -1)
    for k = 7, 8 do redis.call('EXPIRE', KEYS[k], ctx().retention) end
    session_advance(sid, ARGV[4])
  end
  to_archive(ARGV[4], now)
  redis.call('EXPIRE', KEYS[1], ctx().retention)
  redis.call('EXPIRE', KEYS[2], ctx().retention)
  redis.call('EXPIRE', KEYS[3], ctx().retention)
  redis.call('EXPIRE', transcript_key(ARGV[4]), ctx().retention)
elseif status == S.AWAITING_HUMAN then
  set(F.APPROVALS, ARGV[6]); set(F.AWAITING_SINCE, now)
  set(F.APPROVAL_TIMEOUT_MS, approval_timeout); set(F.RUN_DEADLINE_MS, run_deadline)
  redis.call('ZADD', AWAITING, now, ARGV[4])
  -- the reconciler ends the wait at the approval timeout or the run's deadline, whichever is first
  local due = nil
  if approval_timeout ~= '' then due = now + tonumber(approval_timeout) end
  if run_deadline ~= '' and (not due or tonumber(run_deadline) < due) then due = tonumber(run_deadline) end
  if due then
    redis.call('ZADD', LIVE, due, ARGV[4])
  else
    redis.call('ZREM', LIVE, ARGV[4])
  end
elseif status == S.AWAITING_TOOLS then
  -- ARGV[6]: the pending client calls. Parked on no worker until each has a result or times out.
  set(F.CLIENT_PENDING, ARGV[6]); set(F.AWAITING_SINCE, now)
  redis.call('HSET', KEYS[1], unpack(run_fields)); run_fields = {}
  local open, earliest = client_settle(KEYS[1], KEYS[3], now)
  if open == 0 then
    client_resume(KEYS[1], ARGV[4], now)
  else
    redis.call('ZADD', LIVE, earliest, ARGV[4])
  end
elseif status == S.AWAITING_MODEL then
  -- ARGV[6]: the model call in a provider batch ({customId, index, switchAt}). Parked on no worker
  -- until its answer is with the run (model_reply.lua resumes it; at once if it came before this
  -- commit), or its switch time comes (redispatch.lua sends the call to the standard lane).
  local w = cjson.decode(ARGV[6])
  local index = tostring(w.index)
  local switch = ''
  if type(w.switchAt) == 'number' then switch = string.format('%d', w.switchAt) end
  set(F.MODEL_AWAITED, index); set(F.MODEL_SWITCH_AT, switch); set(F.AWAITING_SINCE, now)
  set(F.MODEL_WAIT, ARGV[6])
  redis.call('HSET', KEYS[1], unpack(run_fields)); run_fields = {}
  if redis.call('HGET', KEYS[1], F.MODEL_REPLY_INDEX) == index then
    client_resume(KEYS[1], ARGV[4], now)
  elseif switch ~= '' then
    redis.call('ZADD', LIVE, tonumber(switch), ARGV[4])
  else
    redis.call('ZREM', LIVE, ARGV[4])
  end
elseif status == S.AWAITING_CHILDREN then
  -- Parked on no worker until every child of the round has delivered its result (child_result.lua
  -- resumes it then; at once if they all ended before this commit). The reconciler looks again at
  -- the run's deadline (maxRunDurationMs), or after the queued-run check, whichever is first.
  set(F.AWAITING_SINCE, now); set(F.RUN_DEADLINE_MS, run_deadline)
  redis.call('HSET', KEYS[1], unpack(run_fields)); run_fields = {}
  if children_open(KEYS[1], KEYS[3]) == 0 then
    client_resume(KEYS[1], ARGV[4], now)
  else
    local due = now + tonumber(ctx().queued_check_ms)
    if run_deadline ~= '' and tonumber(run_deadline) < due then due = tonumber(run_deadline) end
    redis.call('ZADD', LIVE, due, ARGV[4])
  end
end
if #run_fields > 0 then redis.call('HSET', KEYS[1], unpack(run_fields)) end
if settle then
  budget_settle(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[settle_at], ARGV[settle_at + 1], ARGV[settle_at + 2],
    ARGV[settle_at + 3])
end
return {'ok', last_text}
