-- counters.lua: the counters of every algorithm, one limit at a time
-- (see script.lua): the steps by kind, each algorithm's in its file
-- (log.lua, token.lua, approx.lua, concurrent.lua, sliding.lua, fixed.lua),
-- and what every kind shares: the fields read up front, places in line,
-- folds and retimes.

-- The counters. s holds the fields of one identity read so far: s[1] the
-- time of the last charge; s.block, s.blocklim, s.expiry, s.resends,
-- s.gen the other identity fields; numbered fields from F_FIRST the
-- limits' own, as numbers, except a log's chunks (strings of TW-digit
-- times; false when the field does not exist) and a sub-bucket's field x,
-- which holds its cost and latest admission (sliding.lua's bdecode): s[x]
-- is the cost, s[-x] the offset; s.qa, s.qc, s.h the pending reservations.
-- A limit's parameters are P[j + P_*], j its base.

-- fields appends to f, from index m + 1, the fields a call reads up front
-- for every limit at time now: a sub-bucket ring's sum and the fields of
-- the current sub-bucket, the next (the edge one) and the one after; a log's oldest
-- slot and, when it has few, its chunks (marked true in ch: kept as
-- strings); a sub-bucket's one field (marked in ch by its ring's width:
-- decoded by bdecode); a window's or a bucket's own fields. It returns the new m;
-- other fields are read on demand. A ring's sum is marked RINGSUM in ch:
-- read takes a marked sum (SOLE - sum, sliding.lua's lean step) as the
-- sum, and every write of the general path writes it plain.
local RINGSUM = -1

-- ringsum is the sum a ring's sum field v holds, marked or not.
local function ringsum(v)
  local sum = tonumber(v) or 0
  if sum < 0 then sum = SOLE - sum end
  return sum
end

local function fields(f, ch, m, now)
  for j = 0, STRIDE * (NL - 1), STRIDE do
    local kind, off = P[j + P_KIND], P[j + P_HASH]
    if kind == K_BUCKETS then
      local n1, w = P[j + P_N] + 1, P[j + P_WIDTH]
      local kb = floor(now / w)
      local a, b = off + 1 + kb % n1, off + 1 + (kb + 1) % n1
      f[m + 1], f[m + 2], f[m + 3], m = off, a, b, m + 3
      ch[m - 2], ch[m - 1], ch[m] = RINGSUM, w, w
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

-- units appends the changed field, value pairs of c units charged at t to
-- a log, a token bucket or sub-buckets from its fields alone (a charge
-- now, or a place in line folded in), keeping s up to date.
local function units(s, key, j, t, c, out, o)
  local kind = P[j + P_KIND]
  if kind == K_BUCKETS then return bcharge(s, key, j, t, c, out, o) end
  if kind == K_TOKEN then return tunits(s, j, t, c, out, o) end
  return lunits(s, key, j, t, c, out, o)
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

-- evaluate returns used, total, avail and retry of one limit at t for
-- cost c.
local function evaluate(s, key, j, t, c)
  return ALG[P[j + P_KIND]].evaluate(s, key, j, t, c)
end

-- report returns the remaining cost and the time until the whole quota is
-- back, after charging ch recorded at at (t, or a lease's stamp).
local function report(s, key, j, t, used, total, avail, ch, at)
  return ALG[P[j + P_KIND]].report(s, key, j, t, used, total, avail, ch, at)
end

-- refill returns how long, after charging ch at t (or a lease at its
-- stamp), the limit admits no more than rem (store/memory's refill): a
-- slot frees when a request ends, and places in line released after t
-- (reservations; for a token bucket, leases too) make no claim.
local function refill(s, key, j, t, used, total, avail, ch, rem)
  local kind = P[j + P_KIND]
  if kind == K_CONC then return 0 end
  local ahead = s.qa and #s.qa > 0 and s.qa[#s.qa] > t
  if (ahead and (RES or kind == K_TOKEN)) or (kind == K_TOKEN and s.stamp) then return 0 end
  return ALG[kind].refill(s, key, j, t, used, total, avail, ch, rem)
end

-- charge appends the changed field, value pairs of one limit charged c at
-- t (no earlier than any time its fields hold) to out from index o and
-- returns the next free index.
local function charge(s, key, j, t, used, total, c, out, o)
  return ALG[P[j + P_KIND]].charge(s, key, j, t, used, total, c, out, o)
end
