-- Sliding window: undo a charge (Redis Cluster refunds) made at time at, where it
-- can still be told apart, never below zero. Tested by the Cluster tests.
local floor = math.floor

local function refund(s, at, P, j, c, out, o)
  local w, n1 = P[j + 2], P[j + 3] + 1
  local b, h = floor(at / w), floor(s[1] / w)
  if b <= h and b > h - n1 then
    local sum, f = P[j + 4] + 1, P[j + 4] + 2 + b % n1
    local back = s[f]
    if back > c then back = c end
    out[o], out[o + 1], out[o + 2], out[o + 3] = f, s[f] - back, sum, s[sum] - back
    o = o + 4
  end
  return o
end
