-- A page of a tenant's runs, newest first: walk the smallest of the filters' indexes and keep the
-- runs that are in every other one. The cursor is the last (createdAt, runId) returned: the next page
-- starts right after it (by its rank while it is still in the index, else by score), so runs
-- inserted meanwhile never shift a page. Entries whose run has expired are dropped on the way.
-- KEYS: none of its own (the indexes are named by its arguments)
-- ARGV: tenant, limit, scanMax, cursorScore ('' = first page), cursorId, createdAfter ('' = none,
--   exclusive), createdBefore ('' = none, exclusive), nFilters, then dim, value pairs.
-- Reply: nextCursorScore ('' = the end), nextCursorId, then per run: runId, status, createdAt,
--   sessionId, agent, batch, finishedAt, clientId (the id shown for a tenant-scoped run).
local limit, scan_max = tonumber(ARGV[2]), tonumber(ARGV[3])
local idx = {}
for j = 1, tonumber(ARGV[8]) do idx[#idx + 1] = index_key(ARGV[1], ARGV[7 + 2 * j], ARGV[8 + 2 * j]) end
if #idx == 0 then idx = {index_key(ARGV[1], 'all', '')} end
local driver, best = 1, nil
for j, k in ipairs(idx) do
  local n = redis.call('ZCARD', k)
  if best == nil or n < best then driver, best = j, n end
end
local dkey = idx[driver]
local max = ARGV[7] ~= '' and ('(' .. ARGV[7]) or '+inf'
local min = ARGV[6] ~= '' and ('(' .. ARGV[6]) or '-inf'
local cs, cid = ARGV[4], ARGV[5]
local by_rank = nil
if cs ~= '' then
  if redis.call('ZSCORE', dkey, cid) == cs then
    by_rank = redis.call('ZREVRANK', dkey, cid) + 1
  elseif ARGV[7] == '' or tonumber(cs) < tonumber(ARGV[7]) then
    max = cs
  end
end
local out, dead = {'', ''}, {}
local after = ARGV[6] ~= '' and tonumber(ARGV[6]) or nil
local before = ARGV[7] ~= '' and tonumber(ARGV[7]) or nil
local scanned, offset, last_score, last_id, ended = 0, 0, nil, nil, false
local n = 0
while not ended and scanned < scan_max and n < limit do
  local page
  if by_rank then
    page = redis.call('ZREVRANGE', dkey, by_rank + offset, by_rank + offset + 99, 'WITHSCORES')
  else
    page = redis.call('ZREVRANGEBYSCORE', dkey, max, min, 'WITHSCORES', 'LIMIT', offset, 100)
  end
  if #page < 200 then ended = true end
  offset = offset + #page / 2
  for p = 1, #page, 2 do
    local id, score = page[p], page[p + 1]
    local s = tonumber(score)
    if after and s <= after then ended = true; break end
    local skip = (before and s >= before) or (not by_rank and cs ~= '' and score == cs and id >= cid)
    if not skip then
      scanned = scanned + 1
      last_score, last_id = score, id
      local ok = true
      for j, k in ipairs(idx) do
        if j ~= driver and not redis.call('ZSCORE', k, id) then ok = false; break end
      end
      if ok then
        local h = redis.call('HMGET', run_key(id), 'status', 'createdAt', 'sessionId', 'agent', 'batch',
          'finishedAt', 'clientId', 'tenant')
        if not h[1] or h[8] ~= ARGV[1] then
          dead[#dead + 1] = id
        else
          out[#out + 1] = id
          for f = 1, 7 do out[#out + 1] = h[f] or '' end
          n = n + 1
        end
      end
      if n >= limit or scanned >= scan_max then break end
    end
  end
end
if #dead > 0 then redis.call('ZREM', dkey, unpack(dead)) end
if last_id and (n >= limit or scanned >= scan_max) then out[1], out[2] = last_score, last_id end
return out
