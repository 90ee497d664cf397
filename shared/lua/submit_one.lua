-- submit_one(K, A, staged): create one run (the body of SUBMIT and, per run, of SUBMIT_MANY, SPAWN_CHILD and
-- SUBMIT_RESTORED). A: the run's record, K: its keys, both read by name (shared.calls.submission.Submit:
-- NEW.<FIELD>, NEWK.<KEY>; its metadata terms from NEWN.META to #A); staged, when given, a hash holding
-- its input already (A's is ''), renamed into the run's. Reply: {V.<verdict>, status or ''}.
-- The listing indexes and the batch of a run just created (A as submit_one's).
local function index_new(run, A, now, status)
  local t, id, batch = A[NEW.TENANT], A[NEW.RUN_ID], A[NEW.BATCH_ID]
  ix_add(t, DIM.ALL, '', id, now)
  ix_add(t, DIM.AGENT, A[NEW.AGENT], id, now)
  if A[NEW.SESSION_ID] ~= '' then ix_add(t, DIM.SESSION, A[NEW.SESSION_ID], id, now) end
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
    local item = A[NEW.ITEM]
    if item ~= '' then ix_add(t, DIM.ITEM, batch, id, tonumber(item)) end
  end
  for j = NEWN.META, #A do ix_add(t, DIM.META, A[j], id, now) end
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
local function submit_one(K, A, staged)
  -- The run and its tombstone asked in one EXISTS: neither, but for a resubmission. A run that exists
  -- is answered by its record; a deleted run is not created again while its tombstone lasts (a
  -- resubmission, a schedule firing).
  if redis.call('EXISTS', NEWK.RUN, ctx().gone .. A[NEW.RUN_ID]) > 0 then
    if redis.call('EXISTS', NEWK.RUN) == 0 then return {V.DELETED, ''} end
    local h = redis.call('HMGET', NEWK.RUN, F.INPUT_HASH, F.STATUS, F.TENANT)
    if h[3] ~= A[NEW.TENANT] then return {V.CONFLICT, ''} end
    if h[1] == A[NEW.INPUT_HASH] then return {V.EXISTS, h[2]} end
    return {V.CONFLICT, h[2]}
  end
  if A[NEW.BATCH_ID] ~= '' and batch_finished(A[NEW.TENANT], A[NEW.BATCH_ID]) then return {V.BATCH_FINISHED, ''} end
  local conc = A[NEW.CONC_KEY]
  if conc ~= '' and redis.call('ZCARD', conc_waiting_key(A[NEW.TENANT], conc)) >= tonumber(ctx().key_waiting_max) then
    return {V.CONCURRENCY_FULL, ''}
  end
  local now = now_ms()
  local dispatch = true
  if A[NEW.SESSION_ID] ~= '' then
    local s = redis.call('HMGET', NEWK.SESSION, SESSION.TENANT, SESSION.ACTIVE_RUN)
    if not s[1] then
      if A[NEW.AUTO_CREATE_SESSION] ~= '1' then return {V.UNKNOWN_SESSION, ''} end
      redis.call('HSET', NEWK.SESSION, SESSION.TENANT, A[NEW.TENANT], SESSION.CREATED_AT, now, SESSION.ACTIVE_RUN, '')
      s = {A[NEW.TENANT], ''}
    elseif s[1] ~= A[NEW.TENANT] then
      return {V.UNKNOWN_SESSION, ''}
    end
    local active = s[2]
    if active and active ~= '' then
      local st = redis.call('HGET', run_key(active), F.STATUS)
      if st and not is_terminal(st) then
        if A[NEW.MULTITASK] == MULTI.REJECT then return {V.SESSION_BUSY, active} end
        dispatch = false
        if A[NEW.MULTITASK] == MULTI.INTERRUPT then
          local shown = A[NEW.CLIENT_ID]  -- the id the client knows the run by
          local why = 'interrupted by run ' .. (shown ~= '' and shown or A[NEW.RUN_ID])
          for _, pid in ipairs(redis.call('LRANGE', NEWK.SESSION_PENDING, 0, -1)) do
            if redis.call('HGET', run_key(pid), F.STATUS) == S.QUEUED then
              finalize(run_key(pid), stream_key(pid), tools_key(pid), pid, S.ABORTED, 'aborted', why)
            end
          end
          redis.call('DEL', NEWK.SESSION_PENDING)
          if st == S.RUNNING then
            request_abort(active, why)
          else
            finalize(run_key(active), stream_key(active), tools_key(active), active, S.ABORTED, 'aborted', why)
            dispatch = true
          end
        end
      end
    end
    redis.call('RPUSH', NEWK.SESSION_RUNS, A[NEW.RUN_ID])
    redis.call('PERSIST', NEWK.SESSION)  -- an idle session's expiry (session_advance) ends with a run of its own
    if dispatch then
      redis.call('HSET', NEWK.SESSION, SESSION.ACTIVE_RUN, A[NEW.RUN_ID])
    else
      redis.call('RPUSH', NEWK.SESSION_PENDING, A[NEW.RUN_ID])
    end
  end
  local prio = tonumber(A[NEW.PRIORITY]) or DEFAULT_PRIORITY
  local run_at = tonumber(A[NEW.RUN_AT])
  local deb = A[NEW.DEBOUNCE_KEY]
  if deb ~= '' then run_at = now + tonumber(A[NEW.DEBOUNCE_MS]) end
  local status = (dispatch and run_at and run_at > now) and S.SCHEDULED or S.QUEUED
  local input = F.INPUT  -- staged: a large retry's or fork's input and origin (submit_restored.lua)
  if staged then
    redis.call('RENAME', staged, NEWK.RUN)
    redis.call('PERSIST', NEWK.RUN)
    input = F.INPUT_HASH  -- the input is there: the slot below writes the hash twice instead
  end
  redis.call('HSET', NEWK.RUN, F.STATUS, status, F.PRIORITY, prio,
    F.RUN_AT, run_at and (deb ~= '' and tostring(run_at) or A[NEW.RUN_AT]) or '',
    input, staged and A[NEW.INPUT_HASH] or A[NEW.INPUT], F.INPUT_HASH, A[NEW.INPUT_HASH],
    F.TENANT, A[NEW.TENANT], F.SESSION_ID, A[NEW.SESSION_ID], F.CREATED_AT, now, F.GEN, 1, F.EPOCH, 0, F.LAST_SEQ, 0,
    F.OWNER, '', F.CRASHES, 0, F.WEBHOOK, A[NEW.WEBHOOK], F.ABORT, '', F.HELD, dispatch and '' or '1',
    F.AGENT, A[NEW.AGENT], F.BATCH, A[NEW.BATCH_ID], F.NO_CONTENT, A[NEW.NO_CONTENT])
  local client_id = A[NEW.CLIENT_ID]
  if client_id ~= '' then redis.call('HSET', NEWK.RUN, F.CLIENT_ID, client_id) end
  local client_session = A[NEW.CLIENT_SESSION]
  if client_session ~= '' then redis.call('HSET', NEWK.RUN, F.CLIENT_SESSION, client_session) end
  if A[NEW.WAITING_FOR] ~= '' and status == S.SCHEDULED then redis.call('HSET', NEWK.RUN, F.WAITING_FOR, A[NEW.WAITING_FOR]) end
  if A[NEW.TRACE] ~= '' then redis.call('HSET', NEWK.RUN, F.TRACE, A[NEW.TRACE]) end
  if A[NEW.AGENT_VERSION] ~= '' then redis.call('HSET', NEWK.RUN, F.AGENT_VERSION, A[NEW.AGENT_VERSION]) end
  if conc ~= '' then
    redis.call('HSET', NEWK.RUN, F.CONC_KEY, conc, F.CONC_LIMIT, A[NEW.CONC_LIMIT])
    -- a run due now takes a slot of its key or waits for one, not on the queue (conc_take)
    if status == S.QUEUED and not conc_take(NEWK.RUN, A[NEW.RUN_ID], A[NEW.TENANT], conc, tonumber(A[NEW.CONC_LIMIT]), queue_score(now, prio)) then
      dispatch = false
    end
  end
  index_new(NEWK.RUN, A, now, status)
  if status == S.SCHEDULED then  -- claim_jobs.lua moves it to the queue once due
    redis.call('SET', NEWK.JOB, job_payload(A[NEW.RUN_ID], 1, now), 'PX', ctx().job_expire_ms + run_at - now)
    zadd(SCHEDULED, run_at, job_id(A[NEW.RUN_ID], 1))
    zadd(LIVE, run_at + tonumber(ctx().queued_check_ms), A[NEW.RUN_ID])
    wake()  -- the waiting workers' wait ends by its runAt from now on
  elseif dispatch then
    redis.call('SET', NEWK.JOB, job_payload(A[NEW.RUN_ID], 1, now), 'PX', ctx().job_expire_ms)
    zadd(QUEUE, queue_score(now, prio), job_id(A[NEW.RUN_ID], 1))
    redis.call('HINCRBY', DEPTH, prio, 1)
    zadd(LIVE, now + tonumber(ctx().queued_check_ms), A[NEW.RUN_ID])
    wake()
  end
  if deb ~= '' then
    debounce(A[NEW.TENANT], deb, A[NEW.RUN_ID], client_id ~= '' and client_id or A[NEW.RUN_ID], tonumber(A[NEW.DEBOUNCE_MS]))
  end
  return {V.CREATED, status}
end
