-- A child run's ending delivered to its parent (on the parent's partition; shared/children.py): the
-- parent's tools hash gets the child's result as the record of the call that started it, once (keyed
-- by the call: a second delivery of the same child is a no-op), and a parent parked in
-- awaiting_children whose last open child this was goes back on the queue.
-- KEYS: parent run, parent tools   ARGV: parentRunId, toolCallId, childRunId, record JSON (state done)
local st = redis.call('HGET', KEYS[1], F.STATUS)
if not st then return {'missing'} end
if is_terminal(st) then return {'finished', st} end
local prev = redis.call('HGET', KEYS[2], ARGV[2])
if prev and cjson.decode(prev).state == TS.DONE then return {'duplicate'} end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
if st == S.AWAITING_CHILDREN and children_open(KEYS[1], KEYS[2]) == 0 then
  client_resume(KEYS[1], ARGV[1], now_ms())
  return {'resumed'}
end
return {'recorded'}
