-- Webhook deliveries of one partition: move newly finished runs from the list the scripts push to
-- into the due set, then claim due deliveries for a lease (so several API processes never deliver
-- one at once).
-- The call: shared.calls.results.ClaimWebhooks.
for _ = 1, 1000 do
  local id = redis.call('RPOP', WEBHOOKS)
  if not id then break end
  redis.call('ZADD', KEY.DUE, 'NX', ARG.NOW, id)
end
local ids = redis.call('ZRANGEBYSCORE', KEY.DUE, '-inf', ARG.NOW, 'LIMIT', 0, ARG.LIMIT)
for _, id in ipairs(ids) do
  redis.call('ZADD', KEY.DUE, tonumber(ARG.NOW) + tonumber(ARG.LEASE_MS), id)
end
return ids
