-- Token bucket (GCRA). Mirrors store/algorithm.go.
-- P from j+1: burst, emission interval (µs), 1, off; field: the theoretical
-- arrival time (TAT). check returns the TAT clamped to t in place of "used".
local floor = math.floor

local function check(s, t, P, j, c)
  local cap, w = P[j + 1], P[j + 2]
  local tat = s[P[j + 4] + 1]
  if tat < t then tat = t end
  if c > cap then return tat, -1 end
  local nxt = tat + c * w - t
  if nxt <= cap * w then return tat, 0 end
  return tat, nxt - cap * w
end

local function report(s, t, P, j, tat, charged)
  local w = P[j + 2]
  tat = tat + charged * w
  return floor((P[j + 1] * w - (tat - t)) / w), tat - t
end

local function charge(s, t, P, j, tat, c, out, o)
  out[o], out[o + 1] = P[j + 4] + 1, string.format('%d', tat + c * P[j + 2])
  return o + 2
end
