-- submit_one(K, A): create one run (the body of SUBMIT and, per run, of SUBMIT_MANY).
-- KEYS: run, arq job key, arq queue, live, session, session pending, session runs
-- ARGV: runId, input, inputHash, tenant, sessionId, job payload, jobExpireMs, queuedCheckMs, webhook,
--       autoCreateSession ('1' or ''), multitaskStrategy (enqueue | reject | interrupt),
--       batchId ('' = none), agent, nMeta, then nMeta 'key=value' strings (the indexed metadata),
--       then the id the client chose when runId is its tenant-scoped id (absent or '' otherwise)
-- The listing indexes and the batch of a run just created (A as submit_one's).
local function index_new(run, A, now)
  local t, id, batch = A[4], A[1], A[12] or ''
  ix_add(t, 'all', '', id, now)
  if A[13] then ix_add(t, 'agent', A[13], id, now) end
  if A[5] ~= '' then ix_add(t, 'session', A[5], id, now) end
  if batch ~= '' then
    if BATCH_NEW then
      local b = BATCH_NEW[batch]
      if not b then b = {t, batch, 0}; BATCH_NEW[batch] = b end
      b[3] = b[3] + 1
    else
      batch_add(t, batch, 1, now)
    end
    ix_add(t, 'batch', batch, id, now)
  end
  for j = 1, tonumber(A[14] or '0') do ix_add(t, 'meta', A[14 + j], id, now) end
  ix_add(t, 'status', 'queued', id, now)
end
local function submit_one(K, A)
  if redis.call('EXISTS', K[1]) == 1 then
    local h = redis.call('HMGET', K[1], 'inputHash', 'status', 'tenant')
    if h[3] ~= A[4] then return {'conflict', ''} end
    if h[1] == A[3] then return {'exists', h[2]} end
    return {'conflict', h[2]}
  end
  if (A[12] or '') ~= '' and batch_finished(A[4], A[12]) then return {'batch_finished', ''} end
  local now = now_ms()
  local dispatch = true
  if A[5] ~= '' then
    local s = redis.call('HMGET', K[5], 'tenant', 'activeRun')
    if not s[1] then
      if A[10] ~= '1' then return {'unknown_session', ''} end
      redis.call('HSET', K[5], 'tenant', A[4], 'createdAt', now, 'activeRun', '')
      s = {A[4], ''}
    elseif s[1] ~= A[4] then
      return {'unknown_session', ''}
    end
    local active = s[2]
    if active and active ~= '' then
      local st = redis.call('HGET', run_key(active), 'status')
      if st and not is_terminal(st) then
        if A[11] == 'reject' then return {'session_busy', active} end
        dispatch = false
        if A[11] == 'interrupt' then
          local why = 'interrupted by run ' .. A[1]
          for _, pid in ipairs(redis.call('LRANGE', K[6], 0, -1)) do
            if redis.call('HGET', run_key(pid), 'status') == 'queued' then
              finalize(run_key(pid), stream_key(pid), tools_key(pid), LIVE, pid, 'aborted', 'aborted', why,
                __MAXLEN__, __RETENTION__)
            end
          end
          redis.call('DEL', K[6])
          if st == 'running' then
            request_abort(active, why)
          else
            finalize(run_key(active), stream_key(active), tools_key(active), LIVE, active, 'aborted', 'aborted', why,
              __MAXLEN__, __RETENTION__)
            dispatch = true
          end
        end
      end
    end
    redis.call('RPUSH', K[7], A[1])
    if dispatch then
      redis.call('HSET', K[5], 'activeRun', A[1])
    else
      redis.call('RPUSH', K[6], A[1])
    end
  end
  redis.call('HSET', K[1], 'status', 'queued', 'input', A[2], 'inputHash', A[3],
    'tenant', A[4], 'sessionId', A[5], 'createdAt', now, 'gen', 1, 'epoch', 0, 'lastSeq', 0,
    'owner', '', 'leaseUntil', 0, 'restarts', 0, 'webhook', A[9], 'abort', '', 'held', dispatch and '' or '1',
    'agent', A[13] or '', 'batch', A[12] or '')
  local client_id = A[15 + tonumber(A[14] or '0')]
  if client_id and client_id ~= '' then redis.call('HSET', K[1], 'clientId', client_id) end
  index_new(K[1], A, now)
  if dispatch then
    redis.call('SET', K[2], A[6], 'PX', A[7])
    zadd(K[3], now, A[1])
    zadd(K[4], now + tonumber(A[8]), A[1])
  end
  return {'created', 'queued'}
end
