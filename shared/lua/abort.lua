-- KEYS: run, stream, tools   ARGV: runId, reason, tenant ('' = any)
local h = redis.call('HMGET', KEYS[1], 'status', 'tenant')
if not h[1] then return {'unknown'} end
if ARGV[3] ~= '' and h[2] ~= ARGV[3] then return {'unknown'} end
if is_terminal(h[1]) then return {'finished', h[1]} end
if h[1] == 'queued' or h[1] == 'awaiting_human' or h[1] == 'awaiting_tools' then
  finalize(KEYS[1], KEYS[2], KEYS[3], ARGV[1], 'aborted', 'aborted', ARGV[2])
  return {'aborted', h[1]}
end
request_abort(ARGV[1], ARGV[2])
return {'requested', h[1]}
