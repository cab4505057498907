-- token.lua: a token bucket (GCRA): its TAT, in the emission interval it
-- was written in, as store/memory's token.go and internal/layout's
-- token.go count it (see script.lua; counters.lua uses these).

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
