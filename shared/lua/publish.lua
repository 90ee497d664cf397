-- Events alone, without a checkpoint: a model's deltas while it streams (worker/runner/commits.py
-- publish_now), several a second for every run that streams. commit.lua's gate and events, and the
-- stream's last seq, in a call of a few arguments where a commit takes some twenty to fifty.
-- Call: shared.calls.steps.Publish (n_events ≥ 1). Returns {ok, lastSeq} | {missing} |
-- {fenced, epoch} | {seq_conflict, lastSeq}, as commit.lua.
local h = redis.call('HMGET', KEY.RUN, F.EPOCH, F.LAST_SEQ, F.OWNER)
local first = num(ARG.FIRST_SEQ)
local refused = append_refused(h, ARG.EPOCH, ARG.LEASE_ID, KEY.LEASE, KEY.STREAM, first, ARGV, ARGN.EVENTS - 1)
if refused then return refused end
local n = num(ARG.N_EVENTS)
local _, last = append_events(KEY.STREAM, first, ARG.FIRST_SEQ, n, ARGV, ARGN.EVENTS, ARG.EPOCH, ARG.TS)
last = last or int_text(first - 1)
redis.call('HSET', KEY.RUN, F.LAST_SEQ, last)
return {V.OK, last}
