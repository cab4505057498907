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

-- tafter is the TAT, before the charge ch, that a token bucket evaluated
-- at t (used) reports from (store/memory's tokenAfter): the one it
-- charged from, or, when nothing was charged, the one any request sees.
local function tafter(s, j, t, used, ch)
  if ch > 0 then return used end
  local x = tat(s, j)
  if x < t then x = t end
  return x
end

-- tunits charges c units at t to a token bucket's TAT, in the interval it
-- was written in, appending the changed field, value pairs to out from
-- index o (store/memory's chargeToken).
local function tunits(s, j, t, c, out, o)
  local off, w = P[j + P_HASH], tw(s, j)
  s[off] = tcharge(s[off], t, c, w)
  out[o], out[o + 1] = off, fmt('%d', s[off])
  if s[off + 1] ~= w then -- never written
    s[off + 1] = w
    out[o + 2], out[o + 3] = off + 1, w
    return o + 4
  end
  return o + 2
end

-- The token bucket's steps (store/memory's token.go).
local TOKEN = {}
ALG[K_TOKEN] = TOKEN

-- evaluate: in the interval the TAT was written in, against this burst.
-- A lease is charged at its stamp: the TAT it starts from is no earlier.
-- A cost up to the burst always fits a full bucket, and a lease whose
-- hold and cost pass the room never does.
function TOKEN.evaluate(s, key, j, t, c)
  local cap, w = P[j + P_CAP], tw(s, j)
  local used, avail, retry = tat(s, j), 0, 0
  if used < t then used = t end
  if s.stamp and used < s.stamp then used = s.stamp end
  local limit = troom(cap, w)
  local x = limit - (used - t)
  if x > 0 then avail = floor(x / w) end
  if c > cap or (s.stamp and (s.stamp - t) + troom(c, P[j + P_WIDTH]) > troom(cap, P[j + P_WIDTH])) then
    retry = -1
  else
    local nx = (used - t) + troom(c, w)
    if nx > limit then retry = nx - limit end
  end
  return used, 0, avail, retry
end

function TOKEN.report(s, key, j, t, used, total, avail, ch, at)
  local w = tw(s, j)
  local ahead = (tafter(s, j, t, used, ch) - t) + ch * w -- the TAT after the charge, from t
  local rem = 0
  local x = troom(P[j + P_CAP], w) - ahead
  if x > 0 then rem = floor(x / w) end
  return rem, ahead
end

function TOKEN.refill(s, key, j, t, used, total, avail, ch, rem)
  local v = tw(s, j)
  local room = troom(P[j + P_CAP], v)
  local x = room - ((tafter(s, j, t, used, ch) - t) + ch * v)
  if x >= room then return P[j + P_WIDTH] end -- full: a token comes back one interval after one is used
  return (rem + 1) * v - x
end

function TOKEN.charge(s, key, j, t, used, total, c, out, o)
  return tunits(s, j, t, c, out, o)
end

-- The lean path (lean.lua) of a token bucket: its TAT, and the interval
-- it was written in.
function TOKEN.leanfields(f, m, j)
  return leannames(f, m, j, 2)
end

-- bind: as SLIDING.bind (sliding.lua). A TAT written in another interval
-- (by a policy of the same ID with another rate) goes to the general path
-- (retime).
function TOKEN.bind(j)
  local cap, w = BAKED[j + P_CAP], BAKED[j + P_WIDTH]
  return function(v, f, x, now, cost, s1, key, wr, o)
    local iv = v[x + 1]
    if iv and iv + 0 ~= w then return nil end
    local tat = (v[x] or 0) + 0
    if tat < now then tat = now end
    if (tat - now) + cost * w > cap * w then return nil end
    tat = tat + cost * w
    local left, rem = cap * w - (tat - now), 0
    if left > 0 then rem = floor(left / w) end
    wr[o], wr[o + 1], o = f[x], fmt('%d', tat), o + 2
    if not iv then wr[o], wr[o + 1], o = f[x + 1], fmt('%d', w), o + 2 end
    return x + 2, o, rem, tat - now, tat, (rem + 1) * w - left
  end
end
