-- A tenant's agent gets its next version (version 1 when it is new or was deleted and forgotten).
-- KEYS: the tenant's agents (name -> pointers JSON), its versions (name@n -> profile JSON)
-- ARGV: name, profile JSON, make it current ('1' or ''), most agents, most versions, how long a
--       deleted agent's versions stay readable to its running runs (ms)
-- Returns {'created', version} | {'full', agents} | {'versions_full', latest}
local name, body, make_current = ARGV[1], ARGV[2], ARGV[3] == '1'
local max_agents, max_versions, keep_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms()
local raw = redis.call('HGET', KEYS[1], name)
local meta = raw and cjson.decode(raw) or nil
if meta == nil or meta.deleted then
  -- a new agent: the tenant's live ones counted, deleted ones past their keep forgotten
  local all = redis.call('HGETALL', KEYS[1])
  local live, deleted = 0, 0
  for i = 1, #all, 2 do
    local m = cjson.decode(all[i + 1])
    if m.deleted then
      if all[i] ~= name and m.deletedAt + keep_ms <= now then
        for v = 1, m.latest do redis.call('HDEL', KEYS[2], all[i] .. '@' .. v) end
        redis.call('HDEL', KEYS[1], all[i])
      else
        deleted = deleted + 1
      end
    else
      live = live + 1
    end
  end
  if live >= max_agents or deleted >= max_agents then return {'full', tostring(live)} end
  if meta ~= nil and meta.deletedAt + keep_ms <= now then
    for v = 1, meta.latest do redis.call('HDEL', KEYS[2], name .. '@' .. v) end
    meta = nil
  end
end
if meta == nil then meta = {latest = 0, created = {}, createdAt = now} end
if meta.latest >= max_versions then return {'versions_full', tostring(meta.latest)} end
local v = meta.latest + 1
redis.call('HSET', KEYS[2], name .. '@' .. v, body)
meta.latest = v
meta.created[v] = now
meta.updatedAt = now
if meta.deleted or make_current or meta.current == nil then
  meta.current = v
  meta.ramp = nil
end
meta.deleted = nil
meta.deletedAt = nil
redis.call('HSET', KEYS[1], name, cjson.encode(meta))
return {'created', tostring(v)}
