-- A retry took this run's place in its batch (producer/restore.py, after submit_restored created
-- the retry): the run leaves the batch's counters and its item index, so the batch's counts and its
-- results show the retry instead; it stays in the batch's run listing, naming the retry. A run Redis
-- no longer holds (the archive does, which took the place first: shared/archive/original.py) comes
-- with its tenant, batch and status: only the batch's counters change, no hash is made for it.
-- Reply: V.LEFT | V.NONE (not in a batch, or it left already; or the batch's hash is gone)
local h = redis.call('HMGET', KEY.RUN, F.TENANT, F.BATCH, F.STATUS)
local gone = not h[1]
if gone and ARG.TENANT ~= '' then h = {ARG.TENANT, ARG.BATCH_ID, ARG.STATUS} end
if not h[1] or (h[2] or '') == '' then return {V.NONE} end
local bk = batch_key(h[1], h[2])
if redis.call('EXISTS', bk) == 1 then
  redis.call('HINCRBY', bk, h[3], -1)
  redis.call('HINCRBY', bk, BATCH.TOTAL, -1)
  if is_terminal(h[3]) then redis.call('HINCRBY', bk, BATCH.DONE, -1) end
elseif gone then
  return {V.NONE}
end
redis.call('ZREM', index_key(h[1], DIM.ITEM, h[2]), ARG.RUN_ID)
if not gone then redis.call('HSET', KEY.RUN, F.BATCH, '', F.RETRIED_BY, ARG.RETRY_ID) end
return {V.LEFT}
