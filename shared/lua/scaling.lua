-- The scaling signal's reading of one partition (read-only; producer/gauges.py): its queued jobs
-- (in the arq queue or held back by a tenant's running cap: the depth counters), the runs its live
-- workers carry, the runs waiting for a human, the scheduled runs not due yet, the queued jobs of
-- each priority, and the queued and running runs of each tenant named (the tenants whose running
-- cap can hold their queued jobs back).
-- The call: shared.calls.dispatch.Scaling.
-- Returns {queued jobs, running runs, awaiting approval, scheduled, queued of each priority (lowest first),
--          queued of tenant 1, running of tenant 1, …}.
-- A worker whose lease expired carries nothing: the reconciler puts its runs back on the queue.
-- Costs O(workers + tenants) O(1) reads: the status indexes (track) are the runs' real statuses.
local running = 0
for _, w in ipairs(redis.call('ZRANGE', WORKERS, 0, -1)) do
  if worker_alive(w) then running = running + redis.call('SCARD', worker_runs_key(w)) end
end
local by_priority, queued = {}, 0
for p = __MIN_PRIORITY__, __MAX_PRIORITY__ do
  by_priority[p + 1] = math.max(0, tonumber(redis.call('HGET', DEPTH, p) or '0') or 0)
  queued = queued + by_priority[p + 1]
end
local out = {queued, running, redis.call('ZCARD', AWAITING), redis.call('ZCARD', SCHEDULED)}
for p = __MIN_PRIORITY__ + 1, __MAX_PRIORITY__ + 1 do out[#out + 1] = by_priority[p] end
for i = ARGN.TENANTS, #ARGV do
  out[#out + 1] = redis.call('ZCARD', index_key(ARGV[i], DIM.STATUS, S.QUEUED))
  out[#out + 1] = redis.call('ZCARD', index_key(ARGV[i], DIM.STATUS, S.RUNNING))
end
return out
