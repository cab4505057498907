-- Token bucket: undo a charge (Redis Cluster refunds) made at time at, where it
-- can still be told apart, never below zero. Tested by the Cluster tests.

local function refund(s, at, P, j, c, out, o)
  local f = P[j + 4] + 1
  out[o], out[o + 1] = f, string.format('%d', s[f] - c * P[j + 2])
  return o + 2
end
