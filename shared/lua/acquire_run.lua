-- acquire_run(run, stream, tools, runId, gen, worker, alive): a worker takes run runId (dispatch
-- gen) under its lease id, at a new epoch (the body of ACQUIRE and, per claimed job, of CLAIM_JOBS;
-- alive: the caller saw the worker's lease unexpired in this call, so it is not looked at again).
-- Refused (no_lease) unless the acquiring worker's own lease is unexpired. The same acquire sent
-- again (its reply lost, or the batch re-sent after a failover) answers as the first did.
-- Reply: ok, epoch, lastSeq, ckpt, input, abort, approvals, tool records, crashes, and a retry's or
-- fork's origin while it has no checkpoint of its own yet ('' otherwise). The tool records are the
-- tools hash's and the run's open claims (commit.lua): a claim stands for its call unless the call
-- has a record past its claim. Then its tenant, ancestry, and the submitter's trace context
-- (F.TRACE, '' = none), its configuration when its checkpoints leave it out (F.CONFIG, '' =
-- inline), and its transcript when they leave that out (transcript_key, '' = inline or none yet),
-- and its priority (F.PRIORITY: as capped at submission; the provider limiter's line orders by it),
-- and the seq of its opening event (F.OPENED, '' = not opened here), and the first event of the
-- answer that resumed it when its script wrote one (F.ANSWERED, '' = none).
-- The opening: a run taken for the first time (no checkpoint, no retry's or fork's origin) gets its
-- ``running`` status event here, at the stream's next seq and the new epoch, as the machine's
-- on_started has it (worker/machine/handlers.py: the status and the agent, with the version of a
-- tenant's agent), so a new run's first write of its own is its first model step's commit, not a
-- round trip before its model call. F.OPENED keeps the event's seq: a run taken again before its
-- first checkpoint (its worker lost) is not opened twice, and its driver leaves the machine's own
-- event out (worker/runner/opening.py).
-- Else a verdict: missing, terminal, superseded, no_lease, busy, exhausted.
-- A payload from LARGE_BYTES on (a fork's input and state, a long run's checkpoint, configuration or
-- transcript) is left out of an ok reply: false (nil) in its place, for the worker to read with plain
-- commands after the script (worker/adapters/left_out.py). Copied into Lua and out again, a megabyte
-- costs the script milliseconds of Redis's CPU in which no other command runs; a plain read copies it
-- once. Whether any may be that large, the hash's memory tells first (MEMORY USAGE: at least its bytes),
-- so a small run pays one command for it.
local LARGE_BYTES = __LARGE_BYTES__
local FIELDS = {F.LAST_SEQ, F.CKPT, F.INPUT, F.ABORT, F.APPROVALS, F.ORIGIN, F.TENANT, F.ANCESTRY, F.CLAIMS,
  F.TRACE, F.CONFIG, F.PRIORITY, F.OPENED, F.AGENT, F.AGENT_VERSION, F.ANSWERED}
local PAYLOADS = {2, 3, 6, 11}  -- ckpt, input, origin, config: FIELDS' indexes
local function acquired(run, stream, tools, run_id, epoch, crashes)
  local left, asked = {}, FIELDS
  if (redis.call('MEMORY', 'USAGE', run, 'SAMPLES', '0') or 0) >= LARGE_BYTES then
    asked = {}
    for i, f in ipairs(FIELDS) do asked[i] = f end
    for _, i in ipairs(PAYLOADS) do
      if redis.call('HSTRLEN', run, FIELDS[i]) >= LARGE_BYTES then left[i] = true; asked[i] = F.EPOCH end
    end
  end
  local d = redis.call('HMGET', run, unpack(asked))
  local function field(i) if left[i] then return false end return d[i] or '' end
  local opened = d[13] or ''
  if opened == '' and not left[2] and (d[2] or '') == '' and not left[6] and (d[6] or '') == '' then
    opened = int_text(tonumber(d[1] or '0') + 1)
    local version = tonumber(d[15] or '')
    version = version and ',"agentVersion":' .. int_text(version) or ''
    xadd_text(stream, opened, EVENT.STATUS, now_ms(),
      '{"status":"' .. S.RUNNING .. '","agent":' .. cjson.encode(d[14] or '') .. version .. '}', ctx().maxlen, epoch)
    redis.call('HSET', run, F.LAST_SEQ, opened, F.OPENED, opened)
    d[1] = opened
  end
  local origin = ''  -- a retry's or fork's, until it has a checkpoint of its own
  if not left[2] and (d[2] or '') == '' then origin = field(6) end
  local transcript = ''
  local tlen = redis.call('STRLEN', transcript_key(run_id))
  if tlen >= LARGE_BYTES then
    transcript = false
  elseif tlen > 0 then
    transcript = redis.call('GET', transcript_key(run_id))
  end
  local records = redis.call('HGETALL', tools)
  if d[9] and d[9] ~= '' then
    local at = {}
    for k = 1, #records, 2 do at[records[k]] = k + 1 end
    for id, claim in pairs(cjson.decode(d[9])) do
      local k = at[id]
      if not k then
        records[#records + 1] = id; records[#records + 1] = cjson.encode(claim)
      elseif cjson.decode(records[k]).state == TS.PENDING then  -- a claim kept there before claims moved
        records[k] = cjson.encode(claim)
      end
    end
  end
  return {ACQ.OK, tostring(epoch), d[1] or '0', field(2), field(3), d[4] or '', d[5] or '', records,
    tostring(crashes), origin, d[7] or '', d[8] or '', d[10] or '', field(11), transcript, d[12] or '', opened,
    d[16] or ''}
end
-- (The HMGET reads track's fields too, from index 6: a run taken from no one moves its indexes with
-- them, a read fewer.)
local function acquire_run(run, stream, tools, run_id, gen, worker, alive)
  local h = redis.call('HMGET', run, F.STATUS, F.GEN, F.OWNER, F.EPOCH, F.CRASHES, unpack(TRACKED))
  if not h[1] then return {ACQ.MISSING} end
  if is_terminal(h[1]) then return {ACQ.TERMINAL, h[1]} end
  if tonumber(h[2]) ~= tonumber(gen) then return {ACQ.SUPERSEDED, h[2]} end
  if not alive and not worker_alive(worker) then return {ACQ.NO_LEASE, worker} end
  if h[3] == worker and h[1] == S.RUNNING then return acquired(run, stream, tools, run_id, h[4], h[5] or '0') end
  if h[3] ~= '' and worker_alive(h[3]) then return {ACQ.BUSY, h[3]} end
  local crashes = tonumber(h[5] or '0')
  local read = h  -- track's fields as read, unless worker_lost wrote the run since
  if h[3] ~= '' then  -- its worker died without handing it back and no sweep has counted that yet
    local ended
    crashes, ended = worker_lost(run, stream, tools, run_id, h[3])
    if ended then return {ACQ.EXHAUSTED, tostring(crashes)} end
    read = nil
  end
  local epoch = tonumber(h[4]) + 1
  redis.call('HSET', run, F.EPOCH, epoch, F.OWNER, worker, F.STATUS, S.RUNNING)
  track(run, run_id, h[1], S.RUNNING, nil, nil, read, 6)
  redis.call('SADD', worker_runs_key(worker), run_id)
  redis.call('ZREM', LIVE, run_id)  -- a running run is watched through its worker's lease
  return acquired(run, stream, tools, run_id, epoch, crashes)
end
