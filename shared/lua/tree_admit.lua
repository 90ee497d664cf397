-- A root run's tree of sub-agents, before its children are created (shared/children.py, on the
-- root's home partition): each new child counts against its parent's children (maxChildren, over
-- all the parent's rounds) and the tree's runs (maxDescendants, the root not counted). A child
-- counted before (a resumed parent asking again) is admitted again without counting twice.
-- KEYS: the tree hash (keys.Partition.tree)
-- ARGV: parentRunId, maxChildren (0 = none), maxDescendants (0 = none), childRunIds…
-- Returns per child, in order: 'ok' | 'max_children' | 'max_descendants' (the cap reached)
local parent, max_children, max_desc = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV do
  local child = ARGV[i]
  if redis.call('HEXISTS', KEYS[1], child) == 1 then
    out[#out + 1] = 'ok'
  else
    local mine = tonumber(redis.call('HGET', KEYS[1], '#' .. parent) or '0')
    local all = tonumber(redis.call('HGET', KEYS[1], '*') or '0')
    if max_children > 0 and mine >= max_children then
      out[#out + 1] = 'max_children'
    elseif max_desc > 0 and all >= max_desc then
      out[#out + 1] = 'max_descendants'
    else
      redis.call('HSET', KEYS[1], child, parent)
      redis.call('HINCRBY', KEYS[1], '#' .. parent, 1)
      redis.call('HINCRBY', KEYS[1], '*', 1)
      out[#out + 1] = 'ok'
    end
  end
end
redis.call('EXPIRE', KEYS[1], ctx().retention)
return out
