-- log.lua: a log's ring, which a policy of a larger rate of the same ID
-- grows (see script.lua and counters.lua).

-- lchunk is how many TW-digit times a ring of R slots packs into one
-- field (internal/layout's LogChunkOf).
local function lchunk(R)
  if R <= LOGSMALL then return SCHUNK end
  return LCHUNK
end

-- lrelay reads a log's pointer field (its oldest slot, plus its ring's
-- size times LOGBASE) into s[off], the oldest slot, and the ring's size
-- into s.ring[j]: the policy's capacity, or more when a policy of the same
-- ID with a larger rate wrote it (a ring only grows: internal/layout's
-- Limit.Ring). A smaller ring it lays out anew in s for the capacity, as
-- store/memory's relayout does: oldest first from slot 0, its times kept,
-- the older slots empty. The new chunks are written only with a charge
-- (units), which then drops the old ring's chunk fields past the new ones
-- (s.relaid[j] holds how many the old ring had).
local function lrelay(s, key, j)
  local cap, off = P[j + P_CAP], P[j + P_HASH]
  local raw = s[off]
  local ptr = raw % LOGBASE
  local rc = (raw - ptr) / LOGBASE
  s[off] = ptr
  if not s.ring then s.ring = {} end
  if raw == 0 then
    rc = cap
    if not s.unlaid then s.unlaid = {} end
    s.unlaid[j] = true -- never written: a place in line records its size (take.lua)
  end
  s.ring[j] = rc
  if rc >= cap then return end
  s.ring[j] = cap
  local ocs = lchunk(rc)
  local onch = ceil(rc / ocs)
  local f, m = {}, 0
  for c = 1, onch do
    if s[off + c] == nil then f[m + 1], m = off + c, m + 1 end
  end
  if m > 0 then
    local v = redis.call('HMGET', key, unpack(f))
    for i = 1, m do s[f[i]] = v[i] or false end
  end
  local slots = {}
  for i = 1, cap - rc do slots[i] = ZEROT end
  for i = 0, rc - 1 do
    local pos = (ptr + i) % rc
    local c, at = s[off + 1 + floor(pos / ocs)], pos % ocs * TW
    local t = ZEROT
    if c and #c >= at + TW then t = sub(c, at + 1, at + TW) end
    slots[#slots + 1] = t
  end
  local cs = lchunk(cap)
  local nch = ceil(cap / cs)
  for ci = 0, nch - 1 do
    local last = (ci + 1) * cs
    if last > cap then last = cap end
    s[off + 1 + ci] = table.concat(slots, '', ci * cs + 1, last)
  end
  for c = nch + 1, onch do s[off + c] = false end
  s[off] = 0
  if not s.relaid then s.relaid = {} end
  s.relaid[j] = onch
end

-- lslot returns the time of the i-th oldest slot of a log.
local function lslot(s, key, j, i)
  local R, off = s.ring[j], P[j + P_HASH]
  local cs = lchunk(R)
  local pos = (s[off] + i) % R
  local f = off + 1 + floor(pos / cs)
  local c = s[f]
  if c == nil then
    c = redis.call('HGET', key, f)
    s[f] = c
  end
  if not c then return 0 end
  local o = (pos % cs) * TW
  if #c < o + TW then return 0 end
  return tonumber(sub(c, o + 1, o + TW))
end

-- lunit returns the time of the i-th oldest of the last capacity units
-- of a log, its pending reservations' units coming after its slots.
local function lunit(s, key, j, i)
  local R = s.ring[j]
  local u = R - P[j + P_CAP] + s.h + i
  if u < R then return lslot(s, key, j, u) end
  u = u - R
  for q = 1, #s.qa do
    if u < s.qc[q] then return s.qa[q] end
    u = u - s.qc[q]
  end
end

-- lavail counts the last capacity units of a log (pending reservations
-- included) that stopped counting by t.
local function lavail(s, key, j, t)
  local lo, hi, per = 0, P[j + P_CAP], P[j + P_PERIOD]
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if lunit(s, key, j, mid) + per <= t then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- lwrite sets the slots of positions pos..pos+c-1 (ring order) of a log to
-- the TW-digit time ts, appending the changed chunk fields to out.
local function lwrite(s, key, j, pos, c, ts, out, o)
  local R, off = s.ring[j], P[j + P_HASH]
  local cs = lchunk(R)
  local i = 0
  while i < c do
    local p0 = (pos + i) % R
    local ci = floor(p0 / cs)
    local f = off + 1 + ci
    local str = s[f]
    if str == nil then str = redis.call('HGET', key, f) end
    if not str then str = '' end
    local nsl = cs
    if (ci + 1) * cs > R then nsl = R - ci * cs end
    local parts = {}
    for q = 0, nsl - 1 do
      if #str >= q * TW + TW then parts[q + 1] = sub(str, q * TW + 1, q * TW + TW) else parts[q + 1] = ZEROT end
    end
    while i < c and floor(((pos + i) % R) / cs) == ci do
      parts[(pos + i) % R % cs + 1] = ts
      i = i + 1
    end
    str = table.concat(parts)
    s[f] = str
    out[o], out[o + 1], o = f, str, o + 2
  end
  return o
end

-- lunits writes c units charged at t into a log's ring, appending the
-- changed field, value pairs to out from index o (store/memory's
-- chargeLog); a ring lrelay laid out anew is written whole.
local function lunits(s, key, j, t, c, out, o)
  local off = P[j + P_HASH]
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

-- The exact log's steps (store/memory's log.go).
local LOG = {}
ALG[K_LOG] = LOG

-- evaluate: cost c fits at t when the c-th oldest of the last capacity
-- units is older than t - Period.
function LOG.evaluate(s, key, j, t, c)
  local avail, retry = lavail(s, key, j, t), 0
  if c > P[j + P_CAP] then
    retry = -1
  else
    local free = lunit(s, key, j, c - 1) + P[j + P_PERIOD]
    if free > t then retry = free - t end
  end
  return 0, 0, avail, retry
end

function LOG.report(s, key, j, t, used, total, avail, ch, at)
  local newest = lunit(s, key, j, P[j + P_CAP] - 1)
  if ch > 0 and at > newest then newest = at end
  local reset = newest + P[j + P_PERIOD] - t
  if reset < 0 then reset = 0 end
  return avail - ch, reset
end

-- refill: the first unit to leave is the oldest counted one, or one
-- charged from t, a Period after t at the earliest.
function LOG.refill(s, key, j, t, used, total, avail, ch, rem)
  local first = t
  if avail < P[j + P_CAP] then
    local u = lunit(s, key, j, avail)
    if u < first then first = u end
  end
  return first + P[j + P_PERIOD] - t
end

function LOG.charge(s, key, j, t, used, total, c, out, o)
  return lunits(s, key, j, t, c, out, o)
end

-- The lean path (lean.lua) of a log: a call of one unit, on a ring of at
-- most LEANCHUNKS chunks, read whole with its pointer field (the oldest
-- slot, and the ring's size times LOGBASE).
local LEANCHUNKS = 8

function LOG.leanfields(f, m, j, now, cost)
  local off = BAKED[j + P_HASH]
  local chunks = ceil(BAKED[j + P_CAP] / BAKED[j + P_CHUNK])
  if cost ~= 1 or chunks > LEANCHUNKS then return nil end
  f[m + 1] = NAMES[off]
  for c = 1, chunks do f[m + 1 + c] = NAMES[off + c] end
  return m + 1 + chunks
end

-- lleanslot is the time in slot pos of a ring whose chunks of cs slots v holds
-- from x (0: empty).
local function lleanslot(v, x, cs, pos)
  local c, at = v[x + floor(pos / cs)], pos % cs * TW
  if c and #c >= at + TW then return tonumber(sub(c, at + 1, at + TW)) end
  return 0
end

-- bind: as SLIDING.bind (sliding.lua). The units that stopped counting
-- by now are the oldest: a search for how many; none, and a unit does not
-- fit. A ring of another size than the capacity (a policy of the same ID
-- with another rate wrote it) goes to the general path (lrelay).
function LOG.bind(j)
  local cap, per, cs = BAKED[j + P_CAP], BAKED[j + P_PERIOD], BAKED[j + P_CHUNK]
  return function(v, f, x, now, cost, s1, key, wr, o)
    local ptr = (v[x] or 0) + 0
    if ptr ~= 0 and ptr - ptr % LOGBASE ~= cap * LOGBASE then return nil end
    ptr = ptr % LOGBASE
    local lo, hi = 0, cap
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if lleanslot(v, x + 1, cs, (ptr + mid) % cap) + per <= now then lo = mid + 1 else hi = mid end
    end
    local ci = floor(ptr / cs)
    local str, nsl = v[x + 1 + ci] or '', cs
    if (ci + 1) * cs > cap then nsl = cap - ci * cs end
    if lo == 0 or #str % TW ~= 0 or #str > nsl * TW then return nil end
    local refill = per
    -- The oldest unit still counting leaves first.
    if lo < cap then refill = lleanslot(v, x + 1, cs, (ptr + lo) % cap) + per - now end
    str = str .. string.rep('0', nsl * TW - #str)
    local at = ptr % cs * TW
    wr[o], wr[o + 1], wr[o + 2], wr[o + 3] = f[x + 1 + ci], sub(str, 1, at) .. fmt(TFMT, now) .. sub(str, at + TW + 1), f[x], fmt('%d', (ptr + 1) % cap + cap * LOGBASE)
    return x + 1 + ceil(cap / cs), o + 4, lo - 1, per, 0, refill
  end
end
