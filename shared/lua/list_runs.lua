-- A page of a tenant's runs, newest first: walk the smallest of the filters' indexes and keep the
-- runs that are in every other one. The cursor is the last (createdAt, runId) looked at: the next
-- page starts right after it (by rank, found in O(log n)), so runs inserted meanwhile never shift a
-- page. Entries whose run has expired are dropped on the way.
-- Bounded work: every index entry looked at (kept or not), every membership probe and every run
-- read costs one of the scanMax reads; when they are spent the page ends there, possibly empty, and
-- the cursor continues after the last entry looked at. Nothing before the cursor, or at or past
-- createdBefore, is walked.
-- The call: shared.calls.listing.ListRuns (the indexes named by its arguments; createdAfter and
-- createdBefore exclusive, '' = none; then nFilters dim, value pairs).
-- Reply: nextCursorScore ('' = the end), nextCursorId, then per run its row: runId, then the run
--   hash fields of shared.listing_row.ListingRow (declared there once, rendered in the HMGET
--   below as __LISTING_FIELDS__), '' for a field the hash lacks.
local limit, budget = tonumber(ARG.LIMIT), tonumber(ARG.SCAN_MAX)
local idx = {}
for j = 1, tonumber(ARG.N_FILTERS) do
  idx[#idx + 1] = index_key(ARG.TENANT, ARGV[ARGN.FILTERS + 2 * j - 2], ARGV[ARGN.FILTERS + 2 * j - 1])
end
if #idx == 0 then idx = {index_key(ARG.TENANT, DIM.ALL, '')} end
local driver, best = 1, nil
for j, k in ipairs(idx) do
  local n = redis.call('ZCARD', k)
  if best == nil or n < best then driver, best = j, n end
end
local dkey = idx[driver]
local after = ARG.CREATED_AFTER ~= '' and tonumber(ARG.CREATED_AFTER) or nil
local before = ARG.CREATED_BEFORE ~= '' and tonumber(ARG.CREATED_BEFORE) or nil
local max = before and ('(' .. ARG.CREATED_BEFORE) or '+inf'
local min = after and ('(' .. ARG.CREATED_AFTER) or '-inf'
local cs, cid = ARG.CURSOR_SCORE, ARG.CURSOR_ID
-- The rank right after the cursor: its entry's rank while it is in the index; else after every
-- entry of a higher score and every entry of its score with an id at or above its id (ids descend
-- among equal scores), found by bisecting those ties: O(log n), however many runs share a time.
local function at_or_above(a, b)  -- a >= b byte by byte, as Redis orders members (Lua's < follows the locale)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a >= #b
end
local function rank_after()
  if redis.call('ZSCORE', dkey, cid) == cs then return redis.call('ZREVRANK', dkey, cid) + 1 end
  local lo = redis.call('ZCOUNT', dkey, '(' .. cs, '+inf')
  local hi = lo + redis.call('ZCOUNT', dkey, cs, cs)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if at_or_above(redis.call('ZREVRANGE', dkey, mid, mid)[1], cid) then lo = mid + 1 else hi = mid end
  end
  return lo
end
-- A cursor at or past createdBefore starts the page at createdBefore: every entry before it in
-- the order lies after the cursor, and none between them is walked to be skipped.
local by_rank = nil
if cs ~= '' and not (before and tonumber(cs) >= before) then by_rank = rank_after() end
local out, dead = {'', ''}, {}
local used, offset, last_score, last_id, ended = 0, 0, nil, nil, false
local n = 0
while not ended and used < budget and n < limit do
  local want = math.min(100, budget - used)
  local page
  if by_rank then
    page = redis.call('ZREVRANGE', dkey, by_rank + offset, by_rank + offset + want - 1, 'WITHSCORES')
  else
    page = redis.call('ZREVRANGEBYSCORE', dkey, max, min, 'WITHSCORES', 'LIMIT', offset, want)
  end
  if #page < 2 * want then ended = true end
  offset = offset + #page / 2
  for p = 1, #page, 2 do
    local id, score = page[p], page[p + 1]
    local s = tonumber(score)
    if after and s <= after then ended = true; break end
    used = used + 1
    last_score, last_id = score, id
    local ok = true
    for j, k in ipairs(idx) do
      if j ~= driver then
        used = used + 1
        if not redis.call('ZSCORE', k, id) then ok = false; break end
      end
    end
    if ok then
      used = used + 1
      local h = redis.call('HMGET', run_key(id), F.TENANT, __LISTING_FIELDS__)  -- the status first
      if not h[2] or h[1] ~= ARG.TENANT then
        dead[#dead + 1] = id
      else
        out[#out + 1] = id
        for f = 2, #h do out[#out + 1] = h[f] or '' end
        n = n + 1
      end
    end
    if n >= limit or used >= budget then break end
  end
end
if #dead > 0 then redis.call('ZREM', dkey, unpack(dead)) end
if last_id and (n >= limit or used >= budget) then out[1], out[2] = last_score, last_id end
return out
