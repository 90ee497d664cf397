-- submit_one(K, A): create one run (the body of SUBMIT and, per run, of SUBMIT_MANY).
-- K: run, arq job key of dispatch 1, session, session pending, session runs (the session's keys
--    are unused without a session)
-- A: runId, input, inputHash, tenant, sessionId, webhook, autoCreateSession ('1' or ''),
--    multitaskStrategy (enqueue | reject | interrupt), batchId ('' = none), agent, nMeta, then nMeta
--    'key=value' strings (the indexed metadata), then the ids the client knows the run and its
--    session by when runId and sessionId are its tenant's keys for them (absent or '' otherwise),
--    then the run's item index in its batch (absent or '' outside a batch), its priority ('' =
--    the default) and its runAt in ms ('' = none; one not ahead of now is due at once), then its trace
--    context (F.TRACE: traceparent, a newline, tracestate; absent or '' = none), then its
--    concurrency key and that key's limit (absent or '' = none; a run with one has no session), then
--    its debounce key and period ms (absent or '' = none; a run with one has no session nor runAt:
--    it is scheduled a period from now, and replaces the run of the key still waiting to start),
--    then why it waits (F.WAITING_FOR: 'rate:<key>' when its rate key delayed its runAt; '' = none), then the version of
--    the tenant's agent it is pinned to (F.AGENT_VERSION; absent or '' = a profile of the file)
-- The listing indexes and the batch of a run just created (A as submit_one's).
local function index_new(run, A, now, status)
  local t, id, batch = A[4], A[1], A[9] or ''
  ix_add(t, DIM.ALL, '', id, now)
  if A[10] then ix_add(t, DIM.AGENT, A[10], id, now) end
  if A[5] ~= '' then ix_add(t, DIM.SESSION, A[5], id, now) end
  if batch ~= '' then
    local sched = status == S.SCHEDULED and 1 or 0
    if BATCH_NEW then
      local b = BATCH_NEW[batch]
      if not b then b = {t, batch, 0, 0}; BATCH_NEW[batch] = b end
      b[3] = b[3] + 1
      b[4] = b[4] + sched
    else
      batch_add(t, batch, 1, now, sched)
    end
    ix_add(t, DIM.BATCH, batch, id, now)
    local item = A[14 + tonumber(A[11] or '0')]
    if item and item ~= '' then ix_add(t, DIM.ITEM, batch, id, tonumber(item)) end
  end
  for j = 1, tonumber(A[11] or '0') do ix_add(t, DIM.META, A[11 + j], id, now) end
  ix_add(t, DIM.STATUS, status, id, now)
end
-- Run ``id`` (``shown``: the id its client knows it by) of debounce key k (tenant t) was just
-- scheduled a period from now: the key's run still waiting to start, if any, ends superseded (its
-- lastError names the run that replaced it; its id stays readable), and this one is the key's now.
local function debounce(t, k, id, shown, period)
  local dk = debounce_key(t, k)
  local pending = redis.call('GET', dk)
  if pending and pending ~= id and redis.call('HGET', run_key(pending), F.STATUS) == S.SCHEDULED then
    finalize(run_key(pending), stream_key(pending), tools_key(pending), pending, S.SUPERSEDED, 'superseded',
      'superseded by run ' .. shown .. ' (the same debounce key within its period)')
    local jid = job_id(pending, 1)
    redis.call('ZREM', SCHEDULED, jid)  -- after finalize: a run created earlier in this call is written by then
    redis.call('DEL', ctx().job_key .. jid)
  end
  redis.call('SET', dk, id, 'PX', period + tonumber(ctx().queued_check_ms))
end
local function submit_one(K, A)
  if redis.call('EXISTS', K[1]) == 1 then
    local h = redis.call('HMGET', K[1], F.INPUT_HASH, F.STATUS, F.TENANT)
    if h[3] ~= A[4] then return {'conflict', ''} end
    if h[1] == A[3] then return {'exists', h[2]} end
    return {'conflict', h[2]}
  end
  -- a deleted run is not created again while its tombstone lasts (a resubmission, a schedule firing)
  if redis.call('EXISTS', ctx().gone .. A[1]) == 1 then return {'deleted', ''} end
  if (A[9] or '') ~= '' and batch_finished(A[4], A[9]) then return {'batch_finished', ''} end
  local conc = A[18 + tonumber(A[11] or '0')] or ''
  if conc ~= '' and redis.call('ZCARD', conc_waiting_key(A[4], conc)) >= tonumber(ctx().key_waiting_max) then
    return {'concurrency_full', ''}
  end
  local now = now_ms()
  local dispatch = true
  if A[5] ~= '' then
    local s = redis.call('HMGET', K[3], SESSION.TENANT, SESSION.ACTIVE_RUN)
    if not s[1] then
      if A[7] ~= '1' then return {'unknown_session', ''} end
      redis.call('HSET', K[3], SESSION.TENANT, A[4], SESSION.CREATED_AT, now, SESSION.ACTIVE_RUN, '')
      s = {A[4], ''}
    elseif s[1] ~= A[4] then
      return {'unknown_session', ''}
    end
    local active = s[2]
    if active and active ~= '' then
      local st = redis.call('HGET', run_key(active), F.STATUS)
      if st and not is_terminal(st) then
        if A[8] == 'reject' then return {'session_busy', active} end
        dispatch = false
        if A[8] == 'interrupt' then
          local shown = A[12 + tonumber(A[11] or '0')]  -- the id the client knows the run by
          local why = 'interrupted by run ' .. ((shown and shown ~= '') and shown or A[1])
          for _, pid in ipairs(redis.call('LRANGE', K[4], 0, -1)) do
            if redis.call('HGET', run_key(pid), F.STATUS) == S.QUEUED then
              finalize(run_key(pid), stream_key(pid), tools_key(pid), pid, S.ABORTED, 'aborted', why)
            end
          end
          redis.call('DEL', K[4])
          if st == S.RUNNING then
            request_abort(active, why)
          else
            finalize(run_key(active), stream_key(active), tools_key(active), active, S.ABORTED, 'aborted', why)
            dispatch = true
          end
        end
      end
    end
    redis.call('RPUSH', K[5], A[1])
    redis.call('PERSIST', K[3])  -- an idle session's expiry (session_advance) ends with a run of its own
    if dispatch then
      redis.call('HSET', K[3], SESSION.ACTIVE_RUN, A[1])
    else
      redis.call('RPUSH', K[4], A[1])
    end
  end
  local nm = tonumber(A[11] or '0')
  local prio = tonumber(A[15 + nm] or '') or DEFAULT_PRIORITY
  local run_at = tonumber(A[16 + nm] or '')
  local deb = A[20 + nm] or ''
  if deb ~= '' then run_at = now + tonumber(A[21 + nm]) end
  local status = (dispatch and run_at and run_at > now) and S.SCHEDULED or S.QUEUED
  redis.call('HSET', K[1], F.STATUS, status, F.PRIORITY, prio, F.RUN_AT, run_at and (deb ~= '' and tostring(run_at) or A[16 + nm]) or '',
    F.INPUT, A[2], F.INPUT_HASH, A[3],
    F.TENANT, A[4], F.SESSION_ID, A[5], F.CREATED_AT, now, F.GEN, 1, F.EPOCH, 0, F.LAST_SEQ, 0,
    F.OWNER, '', F.CRASHES, 0, F.WEBHOOK, A[6], F.ABORT, '', F.HELD, dispatch and '' or '1',
    F.AGENT, A[10] or '', F.BATCH, A[9] or '')
  local client_id = A[12 + tonumber(A[11] or '0')]
  if client_id and client_id ~= '' then redis.call('HSET', K[1], F.CLIENT_ID, client_id) end
  local client_session = A[13 + tonumber(A[11] or '0')]
  if client_session and client_session ~= '' then redis.call('HSET', K[1], F.CLIENT_SESSION, client_session) end
  if (A[22 + nm] or '') ~= '' and status == S.SCHEDULED then redis.call('HSET', K[1], F.WAITING_FOR, A[22 + nm]) end
  local trace = A[17 + tonumber(A[11] or '0')]
  if trace and trace ~= '' then redis.call('HSET', K[1], F.TRACE, trace) end
  local version = A[23 + nm]
  if version and version ~= '' then redis.call('HSET', K[1], F.AGENT_VERSION, version) end
  if conc ~= '' then
    redis.call('HSET', K[1], F.CONC_KEY, conc, F.CONC_LIMIT, A[19 + nm])
    -- a run due now takes a slot of its key or waits for one, not on the queue (conc_take)
    if status == S.QUEUED and not conc_take(K[1], A[1], A[4], conc, tonumber(A[19 + nm]), queue_score(now, prio)) then
      dispatch = false
    end
  end
  index_new(K[1], A, now, status)
  if status == S.SCHEDULED then  -- claim_jobs.lua moves it to the queue once due
    redis.call('SET', K[2], job_payload(A[1], 1, now), 'PX', ctx().job_expire_ms + run_at - now)
    zadd(SCHEDULED, run_at, job_id(A[1], 1))
    zadd(LIVE, run_at + tonumber(ctx().queued_check_ms), A[1])
    wake()  -- the waiting workers' wait ends by its runAt from now on
  elseif dispatch then
    redis.call('SET', K[2], job_payload(A[1], 1, now), 'PX', ctx().job_expire_ms)
    zadd(QUEUE, queue_score(now, prio), job_id(A[1], 1))
    redis.call('HINCRBY', DEPTH, prio, 1)
    zadd(LIVE, now + tonumber(ctx().queued_check_ms), A[1])
    wake()
  end
  if deb ~= '' then debounce(A[4], deb, A[1], (client_id and client_id ~= '') and client_id or A[1], tonumber(A[21 + nm])) end
  return {'created', status}
end
