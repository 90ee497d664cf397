-- The clock every script reads: Redis's (TIME), so worker clocks never decide whose lease expired.
-- One reading per script call (a call is atomic: no other command runs while it does); enter_clock
-- starts each call without one (with Redis Functions this file runs once, when the library loads).
local FIXED_NOW = nil  -- set by a script that creates many runs: one clock reading for all of them
local function now_ms()
  if FIXED_NOW then return FIXED_NOW end
  local t = redis.call('TIME')
  FIXED_NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return FIXED_NOW
end
local function enter_clock() FIXED_NOW = nil end
