-- A root run's tree of sub-agents, before its children are created (shared/children.py, on the
-- root's home partition): each new child counts against its parent's children (maxChildren, over
-- all the parent's rounds) and the tree's runs (maxDescendants, the root not counted). A child
-- counted before (a resumed parent asking again) is admitted again without counting twice.
-- Returns a verdict per child, in order (V.OK, or the cap reached).
local parent, max_children, max_desc = ARG.PARENT_RUN_ID, tonumber(ARG.MAX_CHILDREN), tonumber(ARG.MAX_DESCENDANTS)
local out = {}
for i = ARGN.CHILD_IDS, #ARGV do
  local child = ARGV[i]
  if redis.call('HEXISTS', KEY.TREE, child) == 1 then
    out[#out + 1] = V.OK
  else
    local mine = tonumber(redis.call('HGET', KEY.TREE, '#' .. parent) or '0')
    local all = tonumber(redis.call('HGET', KEY.TREE, '*') or '0')
    if max_children > 0 and mine >= max_children then
      out[#out + 1] = V.MAX_CHILDREN
    elseif max_desc > 0 and all >= max_desc then
      out[#out + 1] = V.MAX_DESCENDANTS
    else
      redis.call('HSET', KEY.TREE, child, parent)
      redis.call('HINCRBY', KEY.TREE, '#' .. parent, 1)
      redis.call('HINCRBY', KEY.TREE, '*', 1)
      out[#out + 1] = V.OK
    end
  end
end
redis.call('EXPIRE', KEY.TREE, ctx().retention)
return out
