-- An Idempotency-Key's run within its window (AGENTMILL_IDEMPOTENCY_TTL_S): the key's record names
-- the run it made; a key without one (never sent, or its window over) takes the id offered.
-- Reply: the run id the key names now (the record's, or the one offered, now recorded)
local had = redis.call('GET', KEY.RECORD)
if had then return had end
redis.call('SET', KEY.RECORD, ARG.OFFERED, 'EX', ARG.TTL_S)
return ARG.OFFERED
