-- A retry or fork (producer/restore.py): one run created as submit_one does, beside it the run it
-- continues (its lineage) and, unless it starts from its input, its origin (shared.origin) and the
-- tool records copied from that run, so they are served and never executed again. The original was
-- read by an earlier call on its own partition: this call touches the new run's only. A retry into a
-- batch that had finished reopens it.
local n = tonumber(ARG.N_RECORDS)
local records = {}
for k = 1, 2 * n do records[k] = ARGV[ARGN.RECORDS + k - 1] end
local A = {}
for k = ARGN.RECORDS + 2 * n, #ARGV do A[#A + 1] = ARGV[k] end
if A[NEW.BATCH_ID] ~= '' and redis.call('EXISTS', KEY.RUN) == 0 then
  redis.call('HDEL', batch_key(A[NEW.TENANT], A[NEW.BATCH_ID]), BATCH.FINISHED_AT)
end
local v = submit_one({KEY.RUN, KEY.JOB, KEY.SESSION, KEY.SESSION_PENDING, KEY.SESSION_RUNS}, A)
if v[1] ~= V.CREATED then return v end
redis.call('HSET', KEY.RUN, F.LINEAGE, ARG.LINEAGE)
if ARG.ORIGIN ~= '' then redis.call('HSET', KEY.RUN, F.ORIGIN, ARG.ORIGIN) end
if n > 0 then redis.call('HSET', KEY.TOOLS, unpack(records)) end
return v
