-- KEYS slots, requests, tokens, pause, waiting, seen; ARGV holder, leaseMs, maxConcurrent, rpm, tpm,
-- tokens, windowMs (0 = no such limit), the run's priority ('' = not in the line: served as it
-- polls), the aging quantum ms, after how long a waiter that stopped asking leaves the line (ms).
-- Returns {0, 'ok'} when granted, else {waitHintMs, reason, its rank in the line (-1: none)}.
-- The line: calls waiting for a concurrency slot or a request in the window are served by run
-- priority with the queue's aging rule (prelude.lua queue_score), from when each began waiting: a
-- waiter is granted only while fewer waiters stand before it than there is room. A call of priority
-- p is so never overtaken by one of priority q that began waiting more than (q - p) quanta after it.
local now = now_ms()
local holder = ARGV[1]
local lease, maxc, rpm = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tpm, tokens, window = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local lined = (ARGV[8] or '') ~= '' and (maxc > 0 or rpm > 0)
local rank = -1
if lined then
  local stale = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now - tonumber(ARGV[10]), 'LIMIT', 0, 100)
  for _, w in ipairs(stale) do
    redis.call('ZREM', KEYS[5], w)
    redis.call('ZREM', KEYS[6], w)
  end
  redis.call('ZADD', KEYS[5], 'NX', now - tonumber(ARGV[8]) * tonumber(ARGV[9]), holder)
  redis.call('ZADD', KEYS[6], now, holder)
  local keep = tonumber(ARGV[10]) * 2
  redis.call('PEXPIRE', KEYS[5], keep)
  redis.call('PEXPIRE', KEYS[6], keep)
  rank = redis.call('ZRANK', KEYS[5], holder)
end
local paused = tonumber(redis.call('GET', KEYS[4]) or '0')
if paused > now then return {paused - now, 'paused', rank} end
local room = nil
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  room = maxc - redis.call('ZCARD', KEYS[1])
  if room <= 0 or (lined and rank >= room) then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {math.max(1, room > 0 and 1 or tonumber(first[2]) - now), 'concurrency', rank}
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  local left = rpm - redis.call('ZCARD', KEYS[2])
  if left <= 0 or (lined and rank >= left) then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {math.max(1, left > 0 and 1 or tonumber(first[2]) + window - now), 'requests', rank}
  end
end
if tpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
  local entries = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  local used = 0
  for i = 1, #entries, 2 do used = used + tonumber(string.match(entries[i], ':(%d+)$')) end
  -- A request larger than the whole budget still goes, alone in an empty window.
  if used > 0 and used + tokens > tpm then
    local excess = used + tokens - tpm
    for i = 1, #entries, 2 do
      excess = excess - tonumber(string.match(entries[i], ':(%d+)$'))
      if excess <= 0 then return {math.max(1, tonumber(entries[i + 1]) + window - now), 'tokens', rank} end
    end
    return {window, 'tokens', rank}
  end
end
if lined then
  redis.call('ZREM', KEYS[5], holder)
  redis.call('ZREM', KEYS[6], holder)
end
if maxc > 0 then
  redis.call('ZADD', KEYS[1], now + lease, holder)
  redis.call('PEXPIRE', KEYS[1], lease * 2)
end
if rpm > 0 then
  redis.call('ZADD', KEYS[2], now, holder)
  redis.call('PEXPIRE', KEYS[2], window * 2)
end
if tpm > 0 then
  redis.call('ZADD', KEYS[3], now, holder .. ':' .. tokens)
  redis.call('PEXPIRE', KEYS[3], window * 2)
end
return {0, 'ok', -1}
