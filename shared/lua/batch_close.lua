-- The end of a batch request that did not say more: no part is still to come, so the batch's share
-- in this partition is finished as soon as its runs have all ended (now, if they already have).
-- The call: shared.calls.batches.BatchClose.
if redis.call('EXISTS', KEY.BATCH) == 0 then return {V.MISSING} end
redis.call('HDEL', KEY.BATCH, BATCH.OPEN)
if redis.call('HEXISTS', KEY.BATCH, BATCH.FINISHED_AT) == 1 or batch_settle(KEY.BATCH) then return {V.FINISHED} end
return {V.CLOSED}
