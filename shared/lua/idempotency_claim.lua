-- An Idempotency-Key's run within its window (AGENTMILL_IDEMPOTENCY_TTL_S): the key's record names
-- the run it made; a key without one (never sent, or its window over) takes the id offered.
-- KEYS: the key's record (keys.Partition.idempotency)   ARGV: the run id offered, the window in s
-- Reply: the run id the key names now (the record's, or the one offered, now recorded)
local had = redis.call('GET', KEYS[1])
if had then return had end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
