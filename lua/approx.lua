-- approx.lua: the weighted two-window approximation, as store/memory's
-- approx.go counts it (see script.lua; counters.lua uses these).

-- awin returns the current and previous windows' costs as seen at t.
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

-- The approximation's steps (store/memory's approx.go).
local APPROX = {}
ALG[K_APPROX] = APPROX

function APPROX.evaluate(s, key, j, t, c)
  local used, total = awin(s, j, t)
  local avail, retry = aavail(j, t, used, total), 0
  if c > P[j + P_CAP] then
    retry = -1
  elseif c > avail then
    retry = aretry(s, j, t, used, total, c)
  end
  return used, total, avail, retry
end

function APPROX.report(s, key, j, t, used, total, avail, ch, at)
  local w, reset = P[j + P_WIDTH], 0
  local k = floor(t / w)
  if used + ch > 0 then
    reset = (k + 2) * w - t
  elseif total > 0 then
    reset = (k + 1) * w - t
  end
  return avail - ch, reset
end

-- refill: until the weighted product admits one more than rem, at most
-- the end of the window (a microsecond less than exact).
function APPROX.refill(s, key, j, t, used, total, avail, ch, rem)
  local w, cap = P[j + P_WIDTH], P[j + P_CAP]
  local k = floor(t / w)
  local m = cap - (used + ch) - (rem + 1)
  if total > 0 and m >= 0 then
    local r = k * w + floor(w - m * w / total) - t - 1
    if r < 0 then r = 0 end
    if r < (k + 1) * w - t then return r end
  end
  return (k + 1) * w - t
end

function APPROX.charge(s, key, j, t, used, total, c, out, o)
  local w, off = P[j + P_WIDTH], P[j + P_HASH]
  out[o], out[o + 1], out[o + 2], out[o + 3] = off, fmt('%d', floor(t / w)), off + 1, used + c
  out[o + 4], out[o + 5] = off + 2, total
  return o + 6
end

-- The lean path (lean.lua) of the approximation: the window's index, its
-- cost and the previous window's.
function APPROX.leanfields(f, m, j)
  return leannames(f, m, j, 3)
end

-- bind: as SLIDING.bind (sliding.lua), with the weighted product in the
-- order aavail computes it.
function APPROX.bind(j)
  local cap, w = BAKED[j + P_CAP], BAKED[j + P_WIDTH]
  return function(v, f, x, now, cost, s1, key, wr, o)
    local k = (now - now % w) / w
    local win, used, prev = (v[x] or 0) + 0, 0, 0
    if win == k then
      used, prev = (v[x + 1] or 0) + 0, (v[x + 2] or 0) + 0
    elseif win == k - 1 then
      prev = (v[x + 1] or 0) + 0
    end
    local avail = floor((cap - used) - prev * (w - (now - k * w)) / w)
    if cost > avail then return nil end
    local rem, refill = avail - cost, (k + 1) * w - now
    if prev > 0 and cap - (used + cost) - (rem + 1) >= 0 then
      local r = k * w + floor(w - (cap - (used + cost) - (rem + 1)) * w / prev) - now - 1
      if r < 0 then r = 0 end
      if r < refill then refill = r end
    end
    wr[o], wr[o + 1], wr[o + 2], wr[o + 3], wr[o + 4], wr[o + 5] = f[x], fmt('%d', k), f[x + 1], fmt('%d', used + cost), f[x + 2], fmt('%d', prev)
    return x + 3, o + 6, rem, (k + 2) * w - now, 0, refill
  end
end
