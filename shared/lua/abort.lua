-- KEYS: run, stream, tools   ARGV: runId, reason, tenant ('' = any)
-- A queued or scheduled run's job leaves the queue (or the scheduled jobs, or its tenant's held
-- jobs) with it: an aborted run takes no slot and is not counted in the queue's depth.
local h = redis.call('HMGET', KEYS[1], F.STATUS, F.TENANT, F.GEN)
if not h[1] then return {'unknown'} end
if ARGV[3] ~= '' and h[2] ~= ARGV[3] then return {'unknown'} end
if is_terminal(h[1]) then return {'finished', h[1]} end
if h[1] == S.QUEUED or h[1] == S.SCHEDULED then
  local jid = job_id(ARGV[1], tonumber(h[3] or '1'))
  local unclaimed = redis.call('ZREM', SCHEDULED, jid) == 1
  if redis.call('ZREM', QUEUE, jid) == 1 or redis.call('ZREM', tenant_held_key(h[2] or ''), jid) == 1 then
    depth_down(run_priority(ARGV[1]))
    unclaimed = true
  end
  if unclaimed then redis.call('DEL', ctx().job_key .. jid) end
end
if h[1] == S.QUEUED or h[1] == S.SCHEDULED or h[1] == S.AWAITING_HUMAN or h[1] == S.AWAITING_TOOLS
    or h[1] == S.AWAITING_CHILDREN or h[1] == S.AWAITING_MODEL then
  finalize(KEYS[1], KEYS[2], KEYS[3], ARGV[1], S.ABORTED, 'aborted', ARGV[2])
  return {'aborted', h[1]}
end
request_abort(ARGV[1], ARGV[2])
return {'requested', h[1]}
