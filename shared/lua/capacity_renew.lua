-- KEYS slots; ARGV holder, leaseMs. Extends a live call's slot (puts it back if it had expired).
redis.call('ZADD', KEYS[1], now_ms() + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
