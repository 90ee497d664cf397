-- Events alone, without a checkpoint: a model's deltas while it streams (worker/runner/commits.py
-- publish_now), several a second for every run that streams. commit.lua's gate and events, and the
-- stream's last seq, in a call of a few arguments where a commit takes some forty.
-- KEYS: run, stream, the publishing worker's lease key
-- ARGV: [1] epoch [2] firstSeq [3] the worker's lease id [4] nEvents (≥ 1), then kind, ts, payload
--   per event
-- Returns {'ok', lastSeq} | {'missing'} | {'fenced', epoch} | {'seq_conflict', lastSeq}, as commit.lua.
local h = redis.call('HMGET', KEYS[1], F.EPOCH, F.LAST_SEQ, F.OWNER)
local first = num(ARGV[2])
local refused = append_refused(h, ARGV[1], ARGV[3], KEYS[3], KEYS[2], first, ARGV, 4)
if refused then return refused end
local n = num(ARGV[4])
append_events(KEYS[2], first, n, ARGV, 5, ARGV[1])
local last = int_text(first + n - 1)
redis.call('HSET', KEYS[1], F.LAST_SEQ, last)
return {'ok', last}
