-- A tenant's submitsPerSecond quota: count n runs in this second's counter (at the tenant's home
-- partition), or refuse them all. ARGV[3] = '1' gives n back (the runs were refused elsewhere).
-- KEYS: the counter   ARGV: n, submitsPerSecond, refund
local n = tonumber(ARGV[1])
if ARGV[3] == '1' then redis.call('DECRBY', KEYS[1], n); return {'ok', 0} end
local c = redis.call('INCRBY', KEYS[1], n)
if c == n then redis.call('PEXPIRE', KEYS[1], 2000) end
if c > tonumber(ARGV[2]) then
  redis.call('DECRBY', KEYS[1], n)
  return {'rate_limited', c - n}
end
return {'ok', 0}
