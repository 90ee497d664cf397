-- KEYS slots, requests, tokens, pause; ARGV holder, leaseMs, maxConcurrent, rpm, tpm, tokens, windowMs
-- (0 = no such limit). Returns {0, 'ok'} when granted, else {waitHintMs, reason}.
local now = now_ms()
local holder = ARGV[1]
local lease, maxc, rpm = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tpm, tokens, window = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local paused = tonumber(redis.call('GET', KEYS[4]) or '0')
if paused > now then return {paused - now, 'paused'} end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= maxc then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {math.max(1, tonumber(first[2]) - now), 'concurrency'}
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if redis.call('ZCARD', KEYS[2]) >= rpm then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {math.max(1, tonumber(first[2]) + window - now), 'requests'}
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
      if excess <= 0 then return {math.max(1, tonumber(entries[i + 1]) + window - now), 'tokens'} end
    end
    return {window, 'tokens'}
  end
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
return {0, 'ok'}
