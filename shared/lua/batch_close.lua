-- The end of a batch request that did not say more: no part is still to come, so the batch's share
-- in this partition is finished as soon as its runs have all ended (now, if they already have).
-- KEYS: batch   ARGV: none
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
redis.call('HDEL', KEYS[1], BATCH.OPEN)
if redis.call('HEXISTS', KEYS[1], BATCH.FINISHED_AT) == 1 or batch_settle(KEYS[1]) then return {'finished'} end
return {'closed'}
