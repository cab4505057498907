-- concurrent.lua: a Concurrent limit's slots, counted per epoch, as
-- store/memory's concurrent.go and internal/layout's concurrent.go count
-- them (see script.lua; counters.lua and slots.lua use these).

-- srolled returns a Concurrent limit's fields (epoch e0, then cur and
-- prev) moved to t's epoch (layout.SlotsRolled).
local function srolled(e0, cur, prev, t, w)
  local e = floor(t / w)
  if e0 == e then return e, cur, prev end
  if e0 == e - 1 then return e, 0, cur end
  return e, 0, 0
end

-- slapse is how long from t until a slot could lapse unrenewed: the end
-- of t's epoch when the one before recorded some (prev > 0), else of the
-- next (store/memory's slotLapse).
local function slapse(t, w, prev)
  local e = (floor(t / w) + 1) * w
  if prev == 0 then e = e + w end
  return e - t
end

-- A Concurrent limit's steps (store/memory's concurrent.go): a request
-- takes one slot, whatever its cost; refill makes no claim (counters.lua
-- answers it).
local CONC = {}
ALG[K_CONC] = CONC

function CONC.evaluate(s, key, j, t, c)
  local cap, w, off = P[j + P_CAP], P[j + P_WIDTH], P[j + P_HASH]
  local _, c0, p0 = srolled(s[off], s[off + 1], s[off + 2], t, w)
  local used, total, retry = c0 + p0, c0, 0
  local avail = cap - used
  if avail < 0 then avail = 0 end
  if used >= cap then retry = slapse(t, w, p0) end
  return used, total, avail, retry
end

function CONC.report(s, key, j, t, used, total, avail, ch, at)
  local w, rem, reset = P[j + P_WIDTH], avail, 0
  if ch > 0 then rem = avail - 1 end
  if total > 0 or ch > 0 then
    reset = slapse(t, w, 0)
  elseif used > 0 then
    reset = slapse(t, w, used)
  end
  return rem, reset
end

function CONC.refill() return 0 end

-- charge: one slot, whatever the cost.
function CONC.charge(s, key, j, t, used, total, c, out, o)
  local w, off = P[j + P_WIDTH], P[j + P_HASH]
  local e, c0, p0 = srolled(s[off], s[off + 1], s[off + 2], t, w)
  s[off], s[off + 1], s[off + 2] = e, c0 + 1, p0
  out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = off, e, off + 1, c0 + 1, off + 2, p0
  return o + 6
end

-- A Concurrent limit has no lean path (lean.lua): its slots go by the
-- general path.
