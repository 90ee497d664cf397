-- An economy request line, written once: a custom_id already written (a resumed run asking again)
-- adds nothing. Bounded: an endpoint's open requests of a model stop at ARGV max.
-- KEYS requests, open (the model's)   ARGV customId, line, max
-- Returns 1 written, 0 already there, -1 full.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now_ms(), ARGV[1])
return 1
