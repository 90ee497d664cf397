-- A sub-agent call's child run, created on the child's partition (shared/children.py): submit_one's
-- run, with its parent's run id, the parent's tool call and its ancestry, and in its tenant's index of
-- the parent's children. Made again (a resumed parent), it finds the same run ('exists').
-- KEYS: as submit_one's   ARGV: parentRunId, parentToolCallId, ancestry JSON (config.Lineage), then submit_one's A
local parent, call, lineage = table.remove(ARGV, 1), table.remove(ARGV, 1), table.remove(ARGV, 1)
local r = submit_one(KEYS, ARGV)
if r[1] == 'created' then
  redis.call('HSET', KEYS[1], F.PARENT_RUN, parent, F.PARENT_CALL, call, F.ANCESTRY, lineage)
  ix_add(ARGV[4], DIM.PARENT, parent, ARGV[1], tonumber(redis.call('HGET', KEYS[1], F.CREATED_AT)))
end
return r
