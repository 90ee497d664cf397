-- Graceful hand-back: the worker stops at a checkpoint and the run goes straight back on the queue.
-- KEYS: run, live, queue, new job key   ARGV: epoch, runId, newGen, newJobId, job, jobExpireMs, queuedCheckMs
local h = redis.call('HMGET', KEYS[1], 'epoch', 'status')
if not h[1] or tonumber(h[1]) ~= tonumber(ARGV[1]) then return {'fenced'} end
if is_terminal(h[2]) then return {'terminal'} end
local now = now_ms()
leave_worker(KEYS[1], ARGV[2])
redis.call('HSET', KEYS[1], 'owner', '', 'leaseUntil', 0, 'gen', ARGV[3], 'status', 'queued')
track(KEYS[1], ARGV[2], h[2], 'queued')
redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[2])
return {'released'}
