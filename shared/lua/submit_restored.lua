-- A retry or fork (producer/restore.py): one run created as submit_one does, beside it the run it
-- continues (its lineage) and, unless it starts from its input, its origin (shared.origin) and the
-- tool records copied from that run, so they are served and never executed again. The original was
-- read by an earlier call on its own partition: this call touches the new run's only.
-- KEYS: submit_one's five, then the new run's tools hash
-- ARGV: lineage JSON, origin JSON ('' = from its input), nRecords, then call id, record JSON per
--   record, then submit_one's A. A retry into a batch that had finished reopens it.
-- Reply: submit_one's.
local lineage, origin = ARGV[1], ARGV[2]
local n = tonumber(ARGV[3])
local records = {}
for k = 1, 2 * n do records[k] = ARGV[3 + k] end
local A = {}
for k = 4 + 2 * n, #ARGV do A[#A + 1] = ARGV[k] end
if (A[9] or '') ~= '' and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HDEL', batch_key(A[4], A[9]), BATCH.FINISHED_AT)
end
local v = submit_one({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]}, A)
if v[1] ~= 'created' then return v end
redis.call('HSET', KEYS[1], F.LINEAGE, lineage)
if origin ~= '' then redis.call('HSET', KEYS[1], F.ORIGIN, origin) end
if n > 0 then redis.call('HSET', KEYS[6], unpack(records)) end
return v
