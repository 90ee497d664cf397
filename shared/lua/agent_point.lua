-- A tenant's agent's pointers changed: its current version, its ramp, or deleted (no new runs; its
-- versions stay readable to the runs using them until they are forgotten: agent_create.lua).
-- KEYS: the tenant's agents (name -> pointers JSON)
-- ARGV: name, what ('current' | 'ramp' | 'delete'), version ('' for none), percent
-- Returns {'ok', pointers JSON} | {'unknown', ''} | {'no_version', latest}
local name, what = ARGV[1], ARGV[2]
local version, percent = tonumber(ARGV[3]), tonumber(ARGV[4])
local raw = redis.call('HGET', KEYS[1], name)
if not raw then return {'unknown', ''} end
local meta = cjson.decode(raw)
if meta.deleted then return {'unknown', ''} end
local now = now_ms()
if version ~= nil and (version < 1 or version > meta.latest) then return {'no_version', tostring(meta.latest)} end
if what == 'current' then
  meta.current = version
  if meta.ramp ~= nil and meta.ramp.version == version then meta.ramp = nil end
elseif what == 'ramp' then
  if version == nil or percent == 0 then meta.ramp = nil else meta.ramp = {version = version, percent = percent} end
elseif what == 'delete' then
  meta.deleted = true
  meta.deletedAt = now
  meta.ramp = nil
end
meta.updatedAt = now
local out = cjson.encode(meta)
redis.call('HSET', KEYS[1], name, out)
return {'ok', out}
