-- A call's slot freed, its tokens counted as it used them (actualTokens -1: keep the estimate). With
-- the line's keys: a waiter that gives up (its run aborted) leaves the line too.
-- The call: shared.calls.limits.CapacityRelease.
redis.call('ZREM', KEY.SLOTS, ARG.HOLDER)
if KEY.WAITING then
  redis.call('ZREM', KEY.WAITING, ARG.HOLDER)
  redis.call('ZREM', KEY.SEEN, ARG.HOLDER)
end
local actual = tonumber(ARG.ACTUAL_TOKENS)
if actual >= 0 and ARG.ESTIMATED_TOKENS ~= ARG.ACTUAL_TOKENS then
  local member = ARG.HOLDER .. ':' .. ARG.ESTIMATED_TOKENS
  local started = redis.call('ZSCORE', KEY.TOKENS, member)
  if started then
    redis.call('ZREM', KEY.TOKENS, member)
    redis.call('ZADD', KEY.TOKENS, started, ARG.HOLDER .. ':' .. actual)
  end
end
return 1
