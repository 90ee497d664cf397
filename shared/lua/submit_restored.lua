-- A retry or fork (producer/restore.py): one run created as submit_one does, beside it the run it
-- continues (its lineage) and, unless it starts from its input, its origin (shared.origin) and the
-- tool records copied from that run, so they are served and never executed again. The original was
-- read by an earlier call on its own partition: this call touches the new run's only. A retry into a
-- batch that had finished reopens it.
-- A large one (producer/restore.py) comes with its input and origin staged (ARG.STAGED '1'): written by
-- plain commands into KEY.STAGED just before this call, renamed here into the new run's hash
-- (submit_one), so their megabytes never pass through Lua; dropped when no run is made.
local n = tonumber(ARG.N_RECORDS)
local records = {}
for k = 1, 2 * n do records[k] = ARGV[ARGN.RECORDS + k - 1] end
local A = {}
for k = ARGN.RECORDS + 2 * n, #ARGV do A[#A + 1] = ARGV[k] end
local staged = ARG.STAGED == '1'
if staged and redis.call('EXISTS', KEY.STAGED) == 0 then  -- before any write: nothing half made
  return redis.error_reply('ERR staged payloads of run ' .. A[NEW.RUN_ID] .. ' expired before their call')
end
if A[NEW.BATCH_ID] ~= '' and redis.call('EXISTS', KEY.RUN) == 0 then
  redis.call('HDEL', batch_key(A[NEW.TENANT], A[NEW.BATCH_ID]), BATCH.FINISHED_AT)
end
local v = submit_one({KEY.RUN, KEY.JOB, KEY.SESSION, KEY.SESSION_PENDING, KEY.SESSION_RUNS}, A,
  staged and KEY.STAGED or nil)
if v[1] ~= V.CREATED then
  if staged then redis.call('DEL', KEY.STAGED) end
  return v
end
redis.call('HSET', KEY.RUN, F.LINEAGE, ARG.LINEAGE)
if ARG.ORIGIN ~= '' then redis.call('HSET', KEY.RUN, F.ORIGIN, ARG.ORIGIN) end
if n > 0 then redis.call('HSET', KEY.TOOLS, unpack(records)) end
return v
