-- A child run's ending delivered to its parent (on the parent's partition; shared/children.py): the
-- parent's tools hash gets the child's result as the record of the call that started it, once (keyed
-- by the call: a second delivery of the same child is a no-op), and a parent parked in
-- awaiting_children whose last open child this was goes back on the queue.
-- The call: shared.calls.results.ChildResult.
local st = redis.call('HGET', KEY.PARENT, F.STATUS)
if not st then return {V.MISSING} end
if is_terminal(st) then return {V.FINISHED, st} end
local prev = redis.call('HGET', KEY.PARENT_TOOLS, ARG.TOOL_CALL_ID)
if prev and cjson.decode(prev).state == TS.DONE then return {V.DUPLICATE} end
redis.call('HSET', KEY.PARENT_TOOLS, ARG.TOOL_CALL_ID, ARG.RECORD)
if st == S.AWAITING_CHILDREN and children_open(KEY.PARENT, KEY.PARENT_TOOLS) == 0 then
  client_resume(KEY.PARENT, ARG.PARENT_RUN_ID, now_ms())
  return {V.RESUMED}
end
return {V.RECORDED}
