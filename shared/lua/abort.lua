-- KEYS: run, stream, tools   ARGV: runId, reason, tenant ('' = any)
local h = redis.call('HMGET', KEYS[1], F.STATUS, F.TENANT)
if not h[1] then return {'unknown'} end
if ARGV[3] ~= '' and h[2] ~= ARGV[3] then return {'unknown'} end
if is_terminal(h[1]) then return {'finished', h[1]} end
if h[1] == S.QUEUED or h[1] == S.AWAITING_HUMAN or h[1] == S.AWAITING_TOOLS or h[1] == S.AWAITING_CHILDREN then
  finalize(KEYS[1], KEYS[2], KEYS[3], ARGV[1], S.ABORTED, 'aborted', ARGV[2])
  return {'aborted', h[1]}
end
request_abort(ARGV[1], ARGV[2])
return {'requested', h[1]}
