-- fixed.lua: a fixed window: the aligned window's index and the cost
-- counted in it, as store/memory's fixed.go counts them (see script.lua;
-- counters.lua calls these steps).

local FIXED = {}
ALG[K_FIXED] = FIXED

function FIXED.evaluate(s, key, j, t, c)
  local cap, w, off = P[j + P_CAP], P[j + P_WIDTH], P[j + P_HASH]
  local used, avail, retry = 0, 0, 0
  if s[off] == floor(t / w) then used = s[off + 1] end
  avail = cap - used
  if avail < 0 then avail = 0 end -- a settle's debt or a lower rate can count more
  if c > cap then
    retry = -1
  elseif used + c > cap then
    retry = (floor(t / w) + 1) * w - t
  end
  return used, 0, avail, retry
end

function FIXED.report(s, key, j, t, used, total, avail, ch, at)
  local w, reset = P[j + P_WIDTH], 0
  if used + ch > 0 then reset = (floor(t / w) + 1) * w - t end
  return avail - ch, reset
end

-- refill: what is left of the window.
function FIXED.refill(s, key, j, t, used, total, avail, ch, rem)
  local w = P[j + P_WIDTH]
  return (floor(t / w) + 1) * w - t
end

function FIXED.charge(s, key, j, t, used, total, c, out, o)
  local w, off = P[j + P_WIDTH], P[j + P_HASH]
  out[o], out[o + 1], out[o + 2], out[o + 3] = off, fmt('%d', floor(t / w)), off + 1, used + c
  return o + 4
end

-- The lean path (lean.lua) of a fixed window: its index and cost.
function FIXED.leanfields(f, m, j)
  return leannames(f, m, j, 2)
end

-- bind: as SLIDING.bind (sliding.lua).
function FIXED.bind(j)
  local cap, w = BAKED[j + P_CAP], BAKED[j + P_WIDTH]
  return function(v, f, x, now, cost, s1, key, wr, o)
    local k, used = (now - now % w) / w, 0
    if (v[x] or 0) + 0 == k then used = (v[x + 1] or 0) + 0 end
    if cost > cap - used then return nil end
    local reset = (k + 1) * w - now
    wr[o], wr[o + 1], wr[o + 2], wr[o + 3] = f[x], fmt('%d', k), f[x + 1], fmt('%d', used + cost)
    return x + 2, o + 4, cap - used - cost, reset, 0, reset
  end
end
