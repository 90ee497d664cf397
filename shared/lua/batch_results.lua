-- A page of a batch's runs with their results, in item order (the batch's item index, kept by
-- submit_one in the batch's 'item' index: runId -> item index). Read-only; at most scanMax entries
-- looked at per call (one HMGET each), the next call starting where this one stopped.
-- The call: shared.calls.results.BatchResults. ``after``: the runs at ``start`` up to it included
--   are skipped, as the index orders the runs of one item index; ``max_bytes``: the call stops once
--   the results it answers reach this size.
-- Reply: stopIndex, stopId (the last entry looked at when the call stopped before the end of the
--   index, else '', ''), then per run: item index, runId (as its keys name it), runId (as its
--   tenant knows it), status, result JSON ('' while it has none).

local t, start, after = ARG.TENANT, ARG.START, ARG.AFTER
local limit, scan_max, max_bytes = tonumber(ARG.LIMIT), tonumber(ARG.SCAN_MAX), tonumber(ARG.MAX_BYTES)
local want = nil
if ARG.STATUSES ~= '' then
  want = {}
  for s in string.gmatch(ARG.STATUSES, '[^,]+') do want[s] = true end
end
local key = index_key(t, DIM.ITEM, ARG.BATCH_ID)
-- Right after ``after`` by its rank while it is at ``start`` (Redis orders one score's members by
-- their bytes; no string comparison here, whose order would follow the server's locale), else
-- from the next item index on.
local by_rank, min = nil, start
if after ~= '' then
  local at = redis.call('ZSCORE', key, after)
  if at and tonumber(at) == tonumber(start) then
    by_rank = redis.call('ZRANK', key, after) + 1
  else
    min = '(' .. start
  end
end
local out = {'', ''}
local scanned, n, offset, bytes = 0, 0, 0, 0
while scanned < scan_max and n < limit do
  local page
  if by_rank then
    page = redis.call('ZRANGE', key, by_rank + offset, by_rank + offset + 99, 'WITHSCORES')
  else
    page = redis.call('ZRANGEBYSCORE', key, min, '+inf', 'WITHSCORES', 'LIMIT', offset, 100)
  end
  for p = 1, #page, 2 do
    local id, score = page[p], page[p + 1]
    scanned = scanned + 1
    local h = redis.call('HMGET', run_key(id), F.STATUS, F.RESULT, F.CLIENT_ID, F.TENANT)
    if h[1] and h[4] == t and (not want or want[h[1]]) then
      out[#out + 1] = score
      out[#out + 1] = id
      out[#out + 1] = (h[3] and h[3] ~= '') and h[3] or id
      out[#out + 1] = h[1]
      out[#out + 1] = h[2] or ''
      n = n + 1
      bytes = bytes + #(h[2] or '')
    end
    if n >= limit or scanned >= scan_max or bytes >= max_bytes then
      out[1], out[2] = score, id
      return out
    end
  end
  if #page < 200 then return out end
  offset = offset + 100
end
return out
