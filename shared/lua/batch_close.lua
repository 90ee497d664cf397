-- The end of a batch request that did not say more: no part is still to come, so the batch is
-- finished as soon as its runs have all ended (now, if they already have). ARGV: tenant, batchId
local bk = batch_key(ARGV[1], ARGV[2])
if redis.call('EXISTS', bk) == 0 then return {'missing'} end
redis.call('HDEL', bk, 'open')
if redis.call('HEXISTS', bk, 'finishedAt') == 1 or batch_settle(bk) then return {'finished'} end
return {'closed'}
