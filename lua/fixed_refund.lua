-- Fixed window: undo a charge (Redis Cluster refunds) made at time at, where it
-- can still be told apart, never below zero. Tested by the Cluster tests.
local floor = math.floor

local function refund(s, at, P, j, c, out, o)
  local off = P[j + 4] + 1
  if s[off] == floor(at / P[j + 2]) then
    local v = s[off + 1] - c
    if v < 0 then v = 0 end
    out[o], out[o + 1], o = off + 1, v, o + 2
  end
  return o
end
