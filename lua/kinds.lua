-- kinds.lua: the arithmetic of the kinds of counter that need more than
-- a sum: a token bucket's TAT and interval, the weighted window's estimate,
-- and a Concurrent limit's epochs (see script.lua; counters.lua uses them).

-- tw is the emission interval a token bucket's TAT was written in: its
-- field after the TAT, or the limit's own when never written (see
-- internal/layout's token.go, which troom and tconv mirror).
local function tw(s, j)
  local w = s[P[j + P_HASH] + 1]
  if not w or w == 0 then return P[j + P_WIDTH] end
  return w
end

-- troom is c units of w µs, in µs, at most MAXSPAN (layout.TokenRoom).
local function troom(c, w)
  local r = c * w
  if r >= MAXSPAN then return MAXSPAN end
  return r
end

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

-- tcharge returns the TAT x, in interval w, after c units charged at t
-- (layout.TokenCharge): at most MAXSPAN past t, unless x lies further.
local function tcharge(x, t, c, w)
  if x < t then x = t end
  local nx = x + troom(c, w)
  if nx - t > MAXSPAN then
    nx = t + MAXSPAN
    if x > nx then nx = x end
  end
  return nx
end

-- tconv returns the TAT x, written in interval from, rewritten in interval
-- to at t (layout.TokenTAT).
local function tconv(x, from, to, t)
  if from == to or x <= t then return x end
  local d = x - t
  local q = floor(d / from)
  local r = d - q * from
  if r < 0 then q, r = q - 1, r + from elseif r >= from then q, r = q + 1, r - from end
  if q * to >= MAXSPAN then return t + MAXSPAN end
  local y = q * to + ceil(r * to / from)
  if y > MAXSPAN then y = MAXSPAN end
  return t + y
end

-- tat is a token bucket's theoretical arrival time with the pending
-- reservations charged in order of release, in the interval it was
-- written in.
local function tat(s, j)
  local x, w = s[P[j + P_HASH]], tw(s, j)
  for q = 1, #s.qa do
    if x < s.qa[q] then x = s.qa[q] end
    x = x + s.qc[q] * w
  end
  return x
end

local function awin(s, j, t)
  local off, k = P[j + P_HASH], floor(t / P[j + P_WIDTH])
  local win = s[off]
  if win == k then return s[off + 1], s[off + 2] end
  if win == k - 1 then return 0, s[off + 1] end
  return 0, 0
end

-- aavail: the weighted product in doubles, in the order Go computes it.
local function aavail(j, t, cur, prev)
  local per = P[j + P_WIDTH]
  local e = t - floor(t / per) * per
  local est = prev * (per - e) / per
  local a = floor((P[j + P_CAP] - cur) - est)
  if a < 0 then return 0 end
  return a
end

local function aretry(s, j, t, cur, prev, c)
  local per, cap = P[j + P_WIDTH], P[j + P_CAP]
  local k = floor(t / per)
  local function fits(x)
    local a, b = awin(s, j, x)
    return aavail(j, x, a, b) >= c
  end
  local x
  local m = cap - cur - c
  if m >= 0 and prev > 0 then
    x = k * per + ceil(per - m * per / prev)
  elseif cur > 0 then
    x = (k + 1) * per + ceil(per - (cap - c) * per / cur)
  else
    x = (k + 1) * per
  end
  if x < t + 1 then x = t + 1 end
  if x > (k + 2) * per then x = (k + 2) * per end
  local i = 0
  while i < 64 and not fits(x) do x, i = x + 1, i + 1 end
  i = 0
  while i < 64 and x > t + 1 and fits(x - 1) do x, i = x - 1, i + 1 end
  return x - t
end

