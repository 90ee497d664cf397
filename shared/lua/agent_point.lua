-- A tenant's agent's pointers changed: its current version, its ramp, or deleted (no new runs; its
-- versions stay readable to the runs using them until they are forgotten: agent_create.lua).
-- The call: shared.calls.agents.AgentPoint.
-- Returns {V.OK, pointers JSON} | {V.UNKNOWN, ''} | {V.NO_VERSION, latest}
local name, what = ARG.NAME, ARG.WHAT
local version, percent = tonumber(ARG.VERSION), tonumber(ARG.PERCENT)
local raw = redis.call('HGET', KEY.AGENTS, name)
if not raw then return {V.UNKNOWN, ''} end
local meta = cjson.decode(raw)
if meta.deleted then return {V.UNKNOWN, ''} end
local now = now_ms()
if version ~= nil and (version < 1 or version > meta.latest) then return {V.NO_VERSION, tostring(meta.latest)} end
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
redis.call('HSET', KEY.AGENTS, name, out)
return {V.OK, out}
