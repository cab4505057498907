-- sliding.lua: a sliding window by sub-buckets: each sub-bucket's cost
-- and latest admission in one field, and the ring's sum, as
-- store/memory's sliding.go counts them (see script.lua; counters.lua
-- uses these).
--
-- A sub-bucket's field (layout.BucketPackFormat) holds its cost c and
-- the offset l of its latest admission within it (0 <= l < w, the ring's
-- width) as one number, c * w + l, written by BPACK while it is below
-- BEXACT: there l is n % w exactly, and c (n - l) / w. Beyond, it holds c
-- and l by BFMT, a negative number to Lua, which bwide splits. So a field
-- is read as a number, v + 0, and its sign says which. A cleared
-- sub-bucket's field is '0'.

-- bwide is the cost and latest admission of a sub-bucket's field v
-- written by BFMT ('-', c, BSEP, l).
local function bwide(v)
  local p = find(v, BSEP, 1, true)
  return tonumber(sub(v, 2, p - 1)), tonumber(sub(v, p + 1))
end

-- bdecode sets s[x] and s[-x] to the cost and latest admission of the
-- sub-bucket of width w whose field x holds v (nil or '0': none).
local function bdecode(s, x, v, w)
  if not v then
    s[x], s[-x] = 0, 0
    return
  end
  local n = v + 0
  if n >= 0 then
    local l = n % w
    s[x], s[-x] = (n - l) / w, l
  else
    s[x], s[-x] = bwide(v)
  end
end

-- bencode is the field of a sub-bucket of width w that holds cost c, its
-- latest admission at offset l.
local function bencode(c, l, w)
  if c == 0 then return '0' end
  local n = c * w + l
  if n < BEXACT then return fmt(BPACK, n) end
  return fmt(BFMT, c, l)
end

-- bload loads the fields of sub-buckets from..to.
local function bload(s, key, j, from, to)
  local off, n1 = P[j + P_HASH], P[j + P_N] + 1
  local f, m = nil, 0
  for b = from, to do
    local x = off + 1 + b % n1
    if s[x] == nil then
      if not f then f = {} end
      f[m + 1], m = x, m + 1
    end
  end
  if m == 0 then return end
  local v = redis.call('HMGET', key, unpack(f))
  local w = P[j + P_WIDTH]
  for i = 1, m do bdecode(s, f[i], v[i], w) end
end

-- badvance appends the changed field, value pairs of a sub-bucket ring
-- moved from the last charge's sub-bucket (s[I_TIME]) to t's: the
-- sub-buckets it passes, t's included, are cleared and leave its sum
-- (store/memory's advanceBuckets).
local function badvance(s, key, j, t, out, o)
  local w, off, n = P[j + P_WIDTH], P[j + P_HASH], P[j + P_N]
  local n1 = n + 1
  local k, h = floor(t / w), floor(s[I_TIME] / w)
  if s[I_TIME] ~= 0 and k <= h then return o end
  local total = 0
  if s[I_TIME] ~= 0 and k - h < n1 then
    bload(s, key, j, h + 1, k)
    total = s[off]
    for b = h + 1, k do total = total - s[off + 1 + b % n1] end
  end
  local lo = h + 1
  if lo < k - n then lo = k - n end
  if s[I_TIME] == 0 then lo = k end -- never charged: no sub-bucket to clear
  for b = lo, k do
    local x = off + 1 + b % n1
    if s[x] ~= 0 then out[o], out[o + 1], o = x, '0', o + 2 end
    s[x], s[-x] = 0, 0
  end
  s[off] = total
  out[o], out[o + 1] = off, total
  return o + 2
end

-- bcharge appends the changed field, value pairs of c units charged at t
-- to sub-buckets (store/memory's chargeBuckets): the ring moves to t's
-- (badvance), which takes the units, t its latest admission.
local function bcharge(s, key, j, t, c, out, o)
  o = badvance(s, key, j, t, out, o)
  local w, off, n1 = P[j + P_WIDTH], P[j + P_HASH], P[j + P_N] + 1
  local k = floor(t / w)
  local x = off + 1 + k % n1
  bload(s, key, j, k, k)
  s[x], s[-x] = s[x] + c, t - k * w
  s[off] = s[off] + c
  out[o], out[o + 1] = x, bencode(s[x], s[-x], w)
  out[o + 2], out[o + 3] = off, s[off]
  return o + 4
end

-- The sub-buckets' steps (store/memory's sliding.go).
local SLIDING = {}
ALG[K_BUCKETS] = SLIDING

function SLIDING.evaluate(s, key, j, t, c)
  local cap, w, n, off, per = P[j + P_CAP], P[j + P_WIDTH], P[j + P_N], P[j + P_HASH], P[j + P_PERIOD]
  local n1 = n + 1
  local k, h = floor(t / w), floor(s[I_TIME] / w)
  local used, total, retry = 0, 0, 0
  if k - h < n1 then
    bload(s, key, j, h + 1, k + 1)
    total = s[off]
    for b = h + 1, k do total = total - s[off + 1 + b % n1] end
    used = total
    local es = off + 1 + (k + 1) % n1
    if s[es] ~= 0 and s[-es] <= t - k * w then used = used - s[es] end
  end
  -- Places in line (leases recorded ahead) are newer than every
  -- sub-bucket: each counts until its time + Period.
  for q = 1, #s.qa do
    if s.qa[q] + per > t then used = used + s.qc[q] end
  end
  local avail = cap - used
  if avail < 0 then avail = 0 end -- a settle's debt or a lower rate can count more
  if c > cap then
    retry = -1
  elseif used + c > cap then
    bload(s, key, j, k - n, h)
    local need, freed = used + c - cap, 0
    for b = k - n, h do
      local x = off + 1 + b % n1
      if s[x] ~= 0 and not (b == k - n and s[-x] <= t - k * w) then
        freed = freed + s[x]
        if freed >= need then
          retry = (b + n) * w + s[-x] - t
          break
        end
      end
    end
    for q = 1, #s.qa do
      if retry ~= 0 then break end
      if s.qa[q] + per > t then
        freed = freed + s.qc[q]
        if freed >= need then retry = s.qa[q] + per - t end
      end
    end
  end
  return used, total, avail, retry
end

-- report: the newest that counts: the charge, or a place in line (newer
-- than every sub-bucket), else a sub-bucket.
function SLIDING.report(s, key, j, t, used, total, avail, ch, at)
  local w, rem = P[j + P_WIDTH], avail - ch
  local newest = -1
  if #s.qa > 0 then newest = s.qa[#s.qa] end
  if ch > 0 and at > newest then newest = at end
  if newest >= 0 then
    local reset = newest + P[j + P_PERIOD] - t
    if reset < 0 then reset = 0 end
    return rem, reset
  end
  if used == 0 then return rem, 0 end -- no counted bucket holds any cost
  local n, off = P[j + P_N], P[j + P_HASH]
  local n1 = n + 1
  local k, h = floor(t / w), floor(s[I_TIME] / w)
  if k - h >= n1 then return rem, 0 end
  -- The newest sub-bucket that counts, from the last charge's down: that
  -- one holds cost but after a refund, so it is read alone first.
  for b = h, k - n, -1 do
    if b == h - 1 then bload(s, key, j, k - n, h - 1) else bload(s, key, j, b, b) end
    local x = off + 1 + b % n1
    if s[x] ~= 0 and not (b == k - n and s[-x] <= t - k * w) then
      return rem, (b + n) * w + s[-x] - t
    end
  end
  return rem, 0
end

-- refill: the oldest sub-bucket still counting leaves first, whole; past
-- the edge one, not the current one, with quota left, the claim stops
-- where the one after the edge could leave at the earliest
-- (store/memory's sliding refill).
function SLIDING.refill(s, key, j, t, used, total, avail, ch, rem)
  local w, n, off, per = P[j + P_WIDTH], P[j + P_N], P[j + P_HASH], P[j + P_PERIOD]
  local n1, k, h = n + 1, floor(t / w), floor(s[I_TIME] / w)
  -- No sub-bucket counting: the oldest place in line that does
  -- (released by t, not yet folded), or one charged from t.
  local function lines()
    local first = t
    for q = 1, #s.qa do
      if s.qa[q] + per > t then
        if s.qa[q] < first then first = s.qa[q] end
        break
      end
    end
    return first + per - t
  end
  if k - h >= n1 then return lines() end
  if rem > 0 then
    -- The loop below would stop at the edge sub-bucket or the current
    -- one, or else at the first of those between, which makes the capped
    -- claim: so their costs, which total holds (sub-buckets k-n..h), say
    -- which without reading those between.
    bload(s, key, j, k - n, k - n)
    local e = off + 1 + (k - n) % n1
    if s[e] ~= 0 and s[-e] > t - k * w then return k * w + s[-e] - t end
    local between, cur = total - s[e], 0
    if h == k then
      cur = off + 1 + k % n1
      bload(s, key, j, k, k) -- read up front unless t is not the call's now
      between = between - s[cur]
    end
    if between > 0 then return math.min((k + 1) * w - t, per) end
    if cur ~= 0 and s[cur] ~= 0 then return (k + n) * w + s[-cur] - t end
    return lines()
  end
  bload(s, key, j, k - n, h)
  for b = k - n, h do
    local x = off + 1 + b % n1
    if s[x] ~= 0 and (b ~= k - n or s[-x] > t - k * w) then
      return (b + n) * w + s[-x] - t
    end
  end
  return lines()
end

function SLIDING.charge(s, key, j, t, used, total, c, out, o)
  return bcharge(s, key, j, t, c, out, o)
end

-- The lean path (lean.lua) of a sliding window. SLIDING_READS is how many
-- fields leanfields names: the ring's sum, then the current and the edge
-- sub-bucket's field (each a cost and a latest admission, BPACK or BFMT;
-- '0' when cleared). They are the names of now's sub-bucket, so they hold
-- from its start to its end (the second and third numbers it returns).
local SLIDING_READS = 3

function SLIDING.leanfields(f, m, j, now, cost)
  -- k is floor(now / w), without a call.
  local off, w, n1 = BAKED[j + P_HASH], BAKED[j + P_WIDTH], BAKED[j + P_N] + 1
  local k = (now - now % w) / w
  f[m + 1], f[m + 2], f[m + 3] = NAMES[off], NAMES[off + 1 + k % n1], NAMES[off + 1 + (k + 1) % n1]
  return m + SLIDING_READS, k * w, (k + 1) * w
end

-- bind returns the lean step of the limit at j, its numbers bound once
-- (a baked policy's are the library's for its life): it charges cost at
-- now to the ring whose fields leanfields read into v from x (s1: the
-- key's last charge), appending its writes to wr from o, and returns the
-- next field to read, the next free index of wr and the limit's
-- remaining, reset, mark and refill, or nil when the general path must
-- answer (the call does not fit, or its edge is not at hand).
function SLIDING.bind(j)
  local cap, w, per, n, off = BAKED[j + P_CAP], BAKED[j + P_WIDTH], BAKED[j + P_PERIOD], BAKED[j + P_N], BAKED[j + P_HASH]
  local n1 = n + 1
  return function(v, f, x, now, cost, s1, key, wr, o)
    local k = (now - now % w) / w
    -- The ring's sum less the sub-buckets that left it (h+1..k hold older
    -- ones' costs), which are cleared as the general path clears them; all
    -- of them when the whole window lapsed. tot is then what sub-buckets
    -- k-n..h hold, the edge one's included.
    local h, tot, cur, used, past = (s1 - s1 % w) / w, 0, 0, 0, false
    -- The ring's sum, marked (SOLE - sum) when no sub-bucket but the last
    -- charge's holds cost: then none passed since needs reading or
    -- clearing. mark: whether the sum this call writes is marked (the
    -- current sub-bucket will be the only one holding cost).
    local sum = (v[x] or 0) + 0
    local sole = sum < 0
    local mark = false
    if sole then sum = SOLE - sum end
    -- Each sub-bucket's field is split here as bdecode splits it, without
    -- a call for BPACK's numbers: nb % w is the latest admission.
    local cs = v[x + 1]
    if cs then
      local nb = cs + 0
      if nb >= 0 then cur = (nb - nb % w) / w else cur = bwide(cs) end
    end
    if s1 ~= 0 and k - h <= 1 then
      tot = sum
      if k > h then tot, cur = tot - cur, 0 elseif sole then mark = true end
    elseif s1 ~= 0 and k - h < n1 then
      tot, cur = sum - cur, 0
      if not sole then
        local gn = {}
        for q = h + 1, k - 1 do gn[q - h] = NAMES[off + 1 + q % n1] end
        local gv = redis.call('HMGET', key, unpack(gn))
        for q = h + 1, k - 1 do
          local c = gv[q - h]
          if c and c ~= '0' then
            local nb = c + 0
            if nb >= 0 then tot = tot - (nb - nb % w) / w else tot = tot - bwide(c) end
            wr[o], wr[o + 1], o = gn[q - h], '0', o + 2
          end
        end
      end
    elseif s1 ~= 0 then
      if not sole then
        local e = v[x + 2]
        for q = k - n, k - 1 do
          if q > k - n or e and e ~= '0' then wr[o], wr[o + 1], o = NAMES[off + 1 + q % n1], '0', o + 2 end
        end
      elseif (k - h) % n1 ~= 0 then
        wr[o], wr[o + 1], o = NAMES[off + 1 + h % n1], '0', o + 2 -- the one that held cost
      end
      cur, mark = 0, true
    else
      cur, mark = 0, true
    end
    local refill = per
    if s1 == 0 or k - h < n1 then
      used = tot
      local edge, counts = v[x + 2], false
      if edge and edge ~= '0' then
        local nb, elat = edge + 0, 0
        if nb >= 0 then
          elat = nb % w
          edge = (nb - elat) / w
        else
          edge, elat = bwide(edge)
        end
        if elat <= now - k * w then
          used = used - edge
        elseif s1 ~= 0 then
          -- The edge sub-bucket still counts, and leaves first.
          refill, counts = k * w + elat - now, true
        end
      end
      -- Else the oldest sub-bucket still counting is the first after the
      -- edge one, up to the last charge's, that holds cost: the current one
      -- when it holds all that counts (a young key), its latest admission
      -- being the last charge's. Else, with quota left, the claim stops
      -- where the one after the edge could leave at the earliest (which one
      -- it is would take reading those after the edge: their fields cost
      -- more than the rest of the decision); with none left it is exact,
      -- which the general path finds (refill, above).
      if s1 ~= 0 and not counts and used > 0 and h == k and used == cur then
        refill = s1 + per - now
      elseif s1 ~= 0 and not counts and used > 0 then
        refill = (k + 1) * w - now
        if refill > per then refill = per end
        past = true
      end
    end
    if used + cost > cap or past and used + cost == cap then return nil end
    local nb = (cur + cost) * w + (now - k * w)
    if nb >= BEXACT then return nil end -- the general path's bencode writes it by BFMT
    -- The sum is marked when the current sub-bucket is now the only one
    -- that holds cost: a new key, a lapsed ring, or the last charge's
    -- sub-bucket again under a marked sum.
    local st = tot + cost
    if mark then st = SOLE - st end
    wr[o], wr[o + 1], wr[o + 2], wr[o + 3] = f[x], fmt('%d', st), f[x + 1], fmt(BPACK, nb)
    return x + SLIDING_READS, o + 4, cap - used - cost, per, 0, refill
  end
end
