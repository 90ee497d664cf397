-- An economy request line, written once: a custom_id already written (a resumed run asking again)
-- adds nothing. Bounded: an endpoint's open requests of a model stop at max_open.
-- Call: shared.calls.economy.EconEnqueue. Returns 1 written, 0 already there, -1 full.
if redis.call('HEXISTS', KEY.REQUESTS, ARG.CUSTOM_ID) == 1 then return 0 end
if redis.call('ZCARD', KEY.OPEN) >= tonumber(ARG.MAX_OPEN) then return -1 end
redis.call('HSET', KEY.REQUESTS, ARG.CUSTOM_ID, ARG.LINE)
redis.call('ZADD', KEY.OPEN, now_ms(), ARG.CUSTOM_ID)
return 1
