-- Fixed window. Mirrors store/algorithm.go.
-- P from j+1: capacity, width (window, µs), 1, off; fields: window index,
-- cost counted in it.
local floor = math.floor

local function check(s, t, P, j, c)
  local cap, w, off = P[j + 1], P[j + 2], P[j + 4] + 1
  local win = floor(t / w)
  local used = 0
  if s[off] == win then used = s[off + 1] end
  if c > cap then return used, -1 end
  if used + c <= cap then return used, 0 end
  return used, (win + 1) * w - t
end

local function report(s, t, P, j, used, charged)
  local w = P[j + 2]
  local reset = 0
  if used + charged > 0 then reset = (floor(t / w) + 1) * w - t end
  return P[j + 1] - used - charged, reset
end

local function charge(s, t, P, j, used, c, out, o)
  local off = P[j + 4] + 1
  out[o], out[o + 1] = off, string.format('%d', floor(t / P[j + 2]))
  out[o + 2], out[o + 3] = off + 1, used + c
  return o + 4
end
