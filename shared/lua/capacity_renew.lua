-- Extends a live call's slot (puts it back if it had expired). The call: shared.calls.limits.CapacityRenew.
redis.call('ZADD', KEY.SLOTS, now_ms() + tonumber(ARG.LEASE_MS), ARG.HOLDER)
redis.call('PEXPIRE', KEY.SLOTS, tonumber(ARG.LEASE_MS) * 2)
return 1
