-- Graceful hand-back: the worker stops at a checkpoint and the run goes straight back on the queue.
-- KEYS: run   ARGV: epoch, runId, newGen
local h = redis.call('HMGET', KEYS[1], F.EPOCH, F.STATUS)
if not h[1] or tonumber(h[1]) ~= tonumber(ARGV[1]) then return {'fenced'} end
if is_terminal(h[2]) then return {'terminal'} end
leave_worker(KEYS[1], ARGV[2])
redis.call('HSET', KEYS[1], F.OWNER, '', F.GEN, ARGV[3], F.STATUS, S.QUEUED)
track(KEYS[1], ARGV[2], h[2], S.QUEUED)
enqueue_gen(ARGV[2], tonumber(ARGV[3]), now_ms())
return {'released'}
