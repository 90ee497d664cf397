-- KEYS slots, tokens[, waiting, seen]; ARGV holder, estimatedTokens, actualTokens (-1: keep the
-- estimate). With the line's keys: a waiter that gives up (its run aborted) leaves the line too.
redis.call('ZREM', KEYS[1], ARGV[1])
if KEYS[3] then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
end
local actual = tonumber(ARGV[3])
if actual >= 0 and ARGV[2] ~= ARGV[3] then
  local member = ARGV[1] .. ':' .. ARGV[2]
  local started = redis.call('ZSCORE', KEYS[2], member)
  if started then
    redis.call('ZREM', KEYS[2], member)
    redis.call('ZADD', KEYS[2], started, ARGV[1] .. ':' .. actual)
  end
end
return 1
