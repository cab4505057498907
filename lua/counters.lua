-- counters.lua: the counters of every algorithm, one limit at a time
-- (see script.lua); each algorithm's own arithmetic is in its file (log.lua,
-- token.lua, approx.lua, concurrent.lua, sliding.lua).

-- The counters. s holds the fields of one identity read so far: s[1] the
-- time of the last charge; s.block, s.blocklim, s.expiry, s.resends,
-- s.gen the other identity fields; numbered fields from F_FIRST the
-- limits' own, as numbers, except a log's chunks (strings of TW-digit
-- times; false when the field does not exist) and a sub-bucket's field x,
-- which holds its cost and latest admission (BSEP between them): s[x] is
-- the cost, s[-x] the offset; s.qa, s.qc, s.h the pending reservations.
-- A limit's parameters are P[j + P_*], j its base.

-- fields appends to f, from index m + 1, the fields a call reads up front
-- for every limit at time now: a sub-bucket ring's sum and the fields of
-- the current sub-bucket, the next (the edge one) and the one after; a log's oldest
-- slot and, when it has few, its chunks (marked true in ch: kept as
-- strings); a sub-bucket's one field (marked 'b' in ch: decoded by
-- bdecode); a window's or a bucket's own fields. It returns the new m;
-- other fields are read on demand.
local function fields(f, ch, m, now)
  for j = 0, STRIDE * (NL - 1), STRIDE do
    local kind, off = P[j + P_KIND], P[j + P_HASH]
    if kind == K_BUCKETS then
      local n1, kb = P[j + P_N] + 1, floor(now / P[j + P_WIDTH])
      local a, b = off + 1 + kb % n1, off + 1 + (kb + 1) % n1
      f[m + 1], f[m + 2], f[m + 3], m = off, a, b, m + 3
      ch[m - 1], ch[m] = 'b', 'b'
      if n1 > 2 then
        -- The one after the edge one, which refill reads (with one
        -- sub-bucket it is the current one).
        f[m + 1], ch[m + 1], m = off + 1 + (kb + 2) % n1, 'b', m + 1
      end
    elseif kind == K_LOG then
      f[m + 1], m = off, m + 1
      local nch = ceil(P[j + P_CAP] / P[j + P_CHUNK])
      if nch <= 8 then
        for c = 1, nch do f[m + 1], ch[m + 1], m = off + c, true, m + 1 end
      end
    elseif kind == K_TOKEN then
      f[m + 1], f[m + 2], m = off, off + 1, m + 2
    elseif kind == K_FIXED then
      f[m + 1], f[m + 2], m = off, off + 1, m + 2
    else
      f[m + 1], f[m + 2], f[m + 3], m = off, off + 1, off + 2, m + 3
    end
  end
  return m
end

-- evaluate returns used, total, avail and retry of one limit at t for
-- cost c (see store/memory's evaluate).
local function evaluate(s, key, j, t, c)
  local kind, cap, w = P[j + P_KIND], P[j + P_CAP], P[j + P_WIDTH]
  local used, total, avail, retry = 0, 0, 0, 0
  if kind == K_LOG then
    avail = lavail(s, key, j, t)
    if c > cap then
      retry = -1
    else
      local free = lunit(s, key, j, c - 1) + P[j + P_PERIOD]
      if free > t then retry = free - t end
    end
  elseif kind == K_BUCKETS then
    local n, off = P[j + P_N], P[j + P_HASH]
    local n1 = n + 1
    local k, h = floor(t / w), floor(s[I_TIME] / w)
    local per = P[j + P_PERIOD]
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
    avail = cap - used
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
  elseif kind == K_FIXED then
    local off = P[j + P_HASH]
    if s[off] == floor(t / w) then used = s[off + 1] end
    avail = cap - used
    if avail < 0 then avail = 0 end -- a settle's debt or a lower rate can count more
    if c > cap then
      retry = -1
    elseif used + c > cap then
      retry = (floor(t / w) + 1) * w - t
    end
  elseif kind == K_TOKEN then
    -- In the interval the TAT was written in, against this burst.
    -- A lease is charged at its stamp: the TAT it starts from is no
    -- earlier.
    w = tw(s, j)
    used = tat(s, j)
    if used < t then used = t end
    if s.stamp and used < s.stamp then used = s.stamp end
    local limit = troom(cap, w)
    local x = limit - (used - t)
    if x > 0 then avail = floor(x / w) end
    -- A cost up to the burst always fits a full bucket, and a lease whose
    -- hold and cost pass the room never does (store/memory's evaluate).
    if c > cap or (s.stamp and (s.stamp - t) + troom(c, P[j + P_WIDTH]) > troom(cap, P[j + P_WIDTH])) then
      retry = -1
    else
      local nx = (used - t) + troom(c, w)
      if nx > limit then retry = nx - limit end
    end
  elseif kind == K_CONC then
    -- A request takes one slot, whatever its cost (store/memory's evaluate).
    local off = P[j + P_HASH]
    local _, c0, p0 = srolled(s[off], s[off + 1], s[off + 2], t, w)
    used, total = c0 + p0, c0
    avail = cap - used
    if avail < 0 then avail = 0 end
    if used >= cap then retry = slapse(t, w, p0) end
  else
    used, total = awin(s, j, t)
    avail = aavail(j, t, used, total)
    if c > cap then
      retry = -1
    elseif c > avail then
      retry = aretry(s, j, t, used, total, c)
    end
  end
  return used, total, avail, retry
end

-- tafter is the TAT, before the charge ch, that a token bucket evaluated
-- at t (used) reports from (store/memory's tokenAfter): the one it
-- charged from, or, when nothing was charged, the one any request sees.
local function tafter(s, j, t, used, ch)
  if ch > 0 then return used end
  local x = tat(s, j)
  if x < t then x = t end
  return x
end

-- report returns the remaining cost and the time until the whole quota is
-- back, after charging ch recorded at at (t, or a lease's stamp).
local function report(s, key, j, t, used, total, avail, ch, at)
  local kind, w = P[j + P_KIND], P[j + P_WIDTH]
  local rem, reset = avail - ch, 0
  if kind == K_LOG then
    local newest = lunit(s, key, j, P[j + P_CAP] - 1)
    if ch > 0 and at > newest then newest = at end
    reset = newest + P[j + P_PERIOD] - t
    if reset < 0 then reset = 0 end
  elseif kind == K_BUCKETS then
    -- The newest that counts: the charge, or a place in line (newer than
    -- every sub-bucket), else a sub-bucket.
    local newest = -1
    if #s.qa > 0 then newest = s.qa[#s.qa] end
    if ch > 0 and at > newest then newest = at end
    if newest >= 0 then
      reset = newest + P[j + P_PERIOD] - t
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
  elseif kind == K_FIXED then
    if used + ch > 0 then reset = (floor(t / w) + 1) * w - t end
  elseif kind == K_CONC then
    if ch > 0 then rem = avail - 1 else rem = avail end
    if total > 0 or ch > 0 then
      reset = slapse(t, w, 0)
    elseif used > 0 then
      reset = slapse(t, w, used)
    end
  elseif kind == K_TOKEN then
    w = tw(s, j)
    local ahead = (tafter(s, j, t, used, ch) - t) + ch * w -- the TAT after the charge, from t
    rem = 0
    local x = troom(P[j + P_CAP], w) - ahead
    if x > 0 then rem = floor(x / w) end
    reset = ahead
  else
    local k = floor(t / w)
    if used + ch > 0 then
      reset = (k + 2) * w - t
    elseif total > 0 then
      reset = (k + 1) * w - t
    end
  end
  return rem, reset
end

-- refill returns how long, after charging ch at t (or a lease at its
-- stamp), the limit admits no more than rem (see store/memory's refill).
local function refill(s, key, j, t, used, total, avail, ch, rem)
  local kind, w, cap = P[j + P_KIND], P[j + P_WIDTH], P[j + P_CAP]
  if kind == K_CONC then return 0 end -- a slot frees when a request ends: no claim
  local k = floor(t / w)
  -- Places in line released after t (reservations; for a token bucket,
  -- leases too): no claim (store/memory's refill).
  local ahead = s.qa and #s.qa > 0 and s.qa[#s.qa] > t
  if (ahead and (RES or kind == K_TOKEN)) or (kind == K_TOKEN and s.stamp) then return 0 end
  -- A window's first unit to leave is its oldest counted one, or one
  -- charged from t on, leases ahead included (store/memory's refill).
  local first = t
  if kind == K_LOG then
    if avail < cap then
      local u = lunit(s, key, j, avail)
      if u < first then first = u end
    end
    return first + P[j + P_PERIOD] - t
  elseif kind == K_BUCKETS then
    local n, off = P[j + P_N], P[j + P_HASH]
    local n1, h = n + 1, floor(s[I_TIME] / w)
    -- No sub-bucket counting: the oldest place in line that does
    -- (released by t, not yet folded), or one charged from t.
    local function lines()
      for q = 1, #s.qa do
        if s.qa[q] + P[j + P_PERIOD] > t then
          if s.qa[q] < first then first = s.qa[q] end
          break
        end
      end
      return first + P[j + P_PERIOD] - t
    end
    if k - h >= n1 then return lines() end
    if rem > 0 then
      -- The loop below would stop at the edge sub-bucket, the one after
      -- it or the current one, or else at the first of those between,
      -- which makes the capped claim: so their costs, which total holds
      -- (sub-buckets k-n..h), say which without reading those between.
      bload(s, key, j, k - n, k - n + 1)
      local e, x = off + 1 + (k - n) % n1, off + 1 + (k - n + 1) % n1
      if s[e] ~= 0 and s[-e] > t - k * w then return k * w + s[-e] - t end
      local between = total - s[e]
      if k - n + 1 <= h then
        if s[x] ~= 0 then return (k + 1) * w + s[-x] - t end
        between = between - s[x]
      end
      local cur = 0
      if h == k and n > 1 then cur = off + 1 + k % n1 end
      if cur ~= 0 then
        bload(s, key, j, k, k) -- read up front unless t is not the call's now
        between = between - s[cur]
      end
      if between > 0 then return math.min((k + 2) * w - t, P[j + P_PERIOD]) end
      if cur ~= 0 and s[cur] ~= 0 then return (k + n) * w + s[-cur] - t end
      return lines()
    end
    bload(s, key, j, k - n, h)
    for b = k - n, h do
      local x = off + 1 + b % n1
      if s[x] ~= 0 and (b ~= k - n or s[-x] > t - k * w) then
        -- Past the edge and the next one, not the current one, with quota
        -- left: where the one after the edge and the next could leave at
        -- the earliest (store/memory's refill).
        if b > k - n + 1 and b ~= k and rem > 0 then return math.min((k + 2) * w - t, P[j + P_PERIOD]) end
        return (b + n) * w + s[-x] - t
      end
    end
    return lines()
  elseif kind == K_TOKEN then
    local v = tw(s, j)
    local room = troom(cap, v)
    local x = room - ((tafter(s, j, t, used, ch) - t) + ch * v)
    if x >= room then return w end
    return (rem + 1) * v - x
  elseif kind == K_APPROX then
    local m = cap - (used + ch) - (rem + 1)
    if total > 0 and m >= 0 then
      local r = k * w + floor(w - m * w / total) - t - 1
      if r < 0 then r = 0 end
      if r < (k + 1) * w - t then return r end
    end
  end
  return (k + 1) * w - t
end

-- units appends the changed field, value pairs of c units charged at t to
-- a log, a token bucket or sub-buckets from its fields alone (a charge
-- now, or a place in line folded in), keeping s up to date.
local function units(s, key, j, t, c, out, o)
  local off = P[j + P_HASH]
  if P[j + P_KIND] == K_BUCKETS then return bcharge(s, key, j, t, c, out, o) end
  if P[j + P_KIND] == K_TOKEN then
    local w = tw(s, j)
    s[off] = tcharge(s[off], t, c, w)
    out[o], out[o + 1] = off, fmt('%d', s[off])
    if s[off + 1] ~= w then -- never written
      s[off + 1] = w
      out[o + 2], out[o + 3] = off + 1, w
      return o + 4
    end
    return o + 2
  end
  local R, ptr = s.ring[j], s[off]
  if s.relaid and s.relaid[j] then
    -- The ring lrelay laid out anew: every chunk of it, and no field of
    -- the old one past them.
    local nch = ceil(R / lchunk(R))
    for ci = 1, nch do out[o], out[o + 1], o = off + ci, s[off + ci], o + 2 end
    if s.relaid[j] > nch then
      local del = {}
      for ci = nch + 1, s.relaid[j] do del[ci - nch] = nm(off + ci) end
      redis.call('HDEL', key, unpack(del))
    end
    s.relaid[j] = nil
  end
  -- Units past the ring's size (a settle's debt) would overwrite slots
  -- this charge already set to t: the ring holds t in every slot.
  local n = c
  if n > R then n = R end
  o = lwrite(s, key, j, ptr, n, fmt(TFMT, t), out, o)
  s[off] = (ptr + c) % R
  out[o], out[o + 1] = off, s[off] + R * LOGBASE
  return o + 2
end

-- fold charges the places in line released by t into every limit's
-- fields, in order of release, before a charge at t; the time of the last
-- charge (s[I_TIME]) moves to each, as sub-buckets read it. It reports
-- whether there were any.
local function fold(s, key, t, out, o)
  local n = 0
  while n < #s.qa and s.qa[n + 1] <= t do
    n = n + 1
    for i = 0, NL - 1 do o = units(s, key, STRIDE * i, s.qa[n], s.qc[n], out, o) end
    if s.qa[n] > s[I_TIME] then s[I_TIME] = s.qa[n] end
    s.h = s.h - s.qc[n]
  end
  if n > 0 then
    local qa, qc = {}, {}
    for q = n + 1, #s.qa do qa[q - n], qc[q - n] = s.qa[q], s.qc[q] end
    s.qa, s.qc = qa, qc
  end
  return o, n > 0
end

-- drained reports whether s holds token buckets and every one of them
-- owes nothing at t (its TAT, places in line included, in the interval it
-- was written in); forget then makes them read as never written: no
-- interval, no places in line (s.qdirty: the next write clears the
-- field). A key that outlived the memory store's entry (its expiry is
-- pushed ahead in steps) so answers as a fresh one (store/memory's
-- drained and forget).
local function drained(s, t)
  local any = false
  for j = 0, STRIDE * (NL - 1), STRIDE do
    if P[j + P_KIND] == K_TOKEN then
      if tat(s, j) > t then return false end
      any = true
    end
  end
  return any
end

local function forget(s)
  for j = 0, STRIDE * (NL - 1), STRIDE do
    if P[j + P_KIND] == K_TOKEN then s[P[j + P_HASH] + 1] = 0 end
  end
  if #s.qa > 0 then s.qa, s.qc, s.h, s.qdirty = {}, {}, 0, true end
end

-- retime rewrites, before a charge at t0 (not a place in line), every
-- token bucket of s written in another interval than its limit's: the
-- reservations released by t0 are folded in first (fold), then what the
-- TAT owes is rewritten in the limit's interval (tconv; units writes it
-- with the charge) and the refund count goes up (store/memory's retime).
-- It returns the next free index of out, whether it rewrote any and
-- whether it folded reservations.
local function retime(s, key, t0, out, o)
  local any = false
  for j = 0, STRIDE * (NL - 1), STRIDE do
    if P[j + P_KIND] == K_TOKEN and tw(s, j) ~= P[j + P_WIDTH] then any = true end
  end
  if not any then return o, false, false end
  local folded
  o, folded = fold(s, key, t0, out, o)
  for j = 0, STRIDE * (NL - 1), STRIDE do
    local off, w = P[j + P_HASH], P[j + P_WIDTH]
    if P[j + P_KIND] == K_TOKEN and tw(s, j) ~= w then
      s[off] = tconv(s[off], tw(s, j), w, t0)
      s[off + 1] = w
      out[o], out[o + 1], o = off + 1, w, o + 2
    end
  end
  return o, true, folded
end

-- reserve records a reservation of c units released at t, in order of
-- release (merged with one released at the same time).
local function reserve(s, t, c)
  local i = #s.qa
  while i > 0 and s.qa[i] > t do i = i - 1 end
  if i > 0 and s.qa[i] == t then
    s.qc[i] = s.qc[i] + c
  else
    table.insert(s.qa, i + 1, t)
    table.insert(s.qc, i + 1, c)
  end
  s.h = s.h + c
end

-- place records a lease's c units at t, a place in line, and returns the
-- time they are recorded at (store/memory's place): t, or, when the
-- identity keeps MAXQ places, the first one at or after t (merged), or,
-- when all lie before it, the latest one's, moved to t.
local function place(s, t, c)
  if #s.qa >= MAXQ then
    for q = 1, #s.qa do
      if s.qa[q] >= t then
        s.qc[q], s.h = s.qc[q] + c, s.h + c
        return s.qa[q]
      end
    end
    local q = #s.qa
    s.qa[q], s.qc[q], s.h = t, s.qc[q] + c, s.h + c
    return t
  end
  reserve(s, t, c)
  return t
end

-- charge appends the changed field, value pairs of one limit charged c at
-- t (no earlier than any time its fields hold) to out from index o and
-- returns the next free index.
local function charge(s, key, j, t, used, total, c, out, o)
  local kind, w, off = P[j + P_KIND], P[j + P_WIDTH], P[j + P_HASH]
  if kind == K_LOG or kind == K_TOKEN then
    return units(s, key, j, t, c, out, o)
  elseif kind == K_BUCKETS then
    return bcharge(s, key, j, t, c, out, o)
  elseif kind == K_FIXED then
    out[o], out[o + 1], out[o + 2], out[o + 3] = off, fmt('%d', floor(t / w)), off + 1, used + c
    return o + 4
  elseif kind == K_CONC then
    -- One slot, whatever the cost.
    local e, c0, p0 = srolled(s[off], s[off + 1], s[off + 2], t, w)
    s[off], s[off + 1], s[off + 2] = e, c0 + 1, p0
    out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = off, e, off + 1, c0 + 1, off + 2, p0
    return o + 6
  end
  out[o], out[o + 1], out[o + 2], out[o + 3] = off, fmt('%d', floor(t / w)), off + 1, used + c
  out[o + 4], out[o + 5] = off + 2, total
  return o + 6
end

