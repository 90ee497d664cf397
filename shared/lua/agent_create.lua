-- A tenant's agent gets its next version (version 1 when it is new or was deleted and forgotten).
-- The call: shared.calls.agents.AgentCreate.
local name, body, make_current = ARG.NAME, ARG.PROFILE, ARG.MAKE_CURRENT == '1'
local max_agents, max_versions, keep_ms = tonumber(ARG.MAX_AGENTS), tonumber(ARG.MAX_VERSIONS), tonumber(ARG.KEEP_MS)
local now = now_ms()
local raw = redis.call('HGET', KEY.AGENTS, name)
local meta = raw and cjson.decode(raw) or nil
if meta == nil or meta.deleted then
  -- a new agent: the tenant's live ones counted, deleted ones past their keep forgotten
  local all = redis.call('HGETALL', KEY.AGENTS)
  local live, deleted = 0, 0
  for i = 1, #all, 2 do
    local m = cjson.decode(all[i + 1])
    if m.deleted then
      if all[i] ~= name and m.deletedAt + keep_ms <= now then
        for v = 1, m.latest do redis.call('HDEL', KEY.VERSIONS, all[i] .. '@' .. v) end
        redis.call('HDEL', KEY.AGENTS, all[i])
      else
        deleted = deleted + 1
      end
    else
      live = live + 1
    end
  end
  if live >= max_agents or deleted >= max_agents then return {V.FULL, tostring(live)} end
  if meta ~= nil and meta.deletedAt + keep_ms <= now then
    for v = 1, meta.latest do redis.call('HDEL', KEY.VERSIONS, name .. '@' .. v) end
    meta = nil
  end
end
if meta == nil then meta = {latest = 0, created = {}, createdAt = now} end
if meta.latest >= max_versions then return {V.VERSIONS_FULL, tostring(meta.latest)} end
local v = meta.latest + 1
redis.call('HSET', KEY.VERSIONS, name .. '@' .. v, body)
meta.latest = v
meta.created[v] = now
meta.updatedAt = now
if meta.deleted or make_current or meta.current == nil then
  meta.current = v
  meta.ramp = nil
end
meta.deleted = nil
meta.deletedAt = nil
redis.call('HSET', KEY.AGENTS, name, cjson.encode(meta))
return {V.CREATED, tostring(v)}
