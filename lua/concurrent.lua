-- concurrent.lua: a Concurrent limit's slots, counted per epoch, as
-- store/memory's concurrent.go and internal/layout's concurrent.go count
-- them (see script.lua; counters.lua and slots.lua use these).

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
