-- The scaling signal's reading of one partition (read-only; producer/gauges.py): its arq queue,
-- the runs its live workers carry, the runs waiting for a human, and the queued and running runs of
-- each tenant named (the tenants whose running cap can hold their queued jobs back).
-- KEYS: none of its own
-- ARGV: tenants…
-- Returns {queued jobs, running runs, awaiting approval, queued of tenant 1, running of tenant 1, …}.
-- A worker whose lease expired carries nothing: the reconciler puts its runs back on the queue.
-- Costs O(workers + tenants) O(1) reads: the status indexes (track) are the runs' real statuses.
local running = 0
for _, w in ipairs(redis.call('ZRANGE', WORKERS, 0, -1)) do
  if worker_alive(w) then running = running + redis.call('SCARD', worker_runs_key(w)) end
end
local out = {redis.call('ZCARD', QUEUE), running, redis.call('ZCARD', AWAITING)}
for i = 1, #ARGV do
  out[#out + 1] = redis.call('ZCARD', index_key(ARGV[i], DIM.STATUS, S.QUEUED))
  out[#out + 1] = redis.call('ZCARD', index_key(ARGV[i], DIM.STATUS, S.RUNNING))
end
return out
