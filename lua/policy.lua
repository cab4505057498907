-- policy.lua: field names, the policy and places in line (see script.lua).

-- nm names the numbered hash field x: its digits, made without a printf
-- (Redis would turn a number argument into digits with a costlier one) or
-- a call to floor.
local function nm(x)
  if x < 10 then return char(48 + x) end
  if x < 100 then
    local u = x % 10
    return char(48 + (x - u) / 10, 48 + u)
  end
  return fmt('%d', x)
end

-- The policy, baked or from ARGV from index a (its header at the
-- positions Q_*, then STRIDE numbers per limit); a is then past it. A
-- library's baked policy is read once, by its first call that needs it
-- (BAKEDREAD; nothing writes P): EVAL makes everything again each call.
local TTL, NL, BLOCK, IDTTL, RES, PEND, P
local BAKEDREAD = false
local function policy(src, a)
  if BAKEDREAD and src == BAKED then return a + QHEAD + STRIDE * NL end
  local h = a - 1
  TTL, NL, BLOCK, IDTTL = tonumber(src[h + Q_TTL]), tonumber(src[h + Q_LIMITS]), tonumber(src[h + Q_BLOCK]), tonumber(src[h + Q_IDTTL])
  RES = tostring(src[h + Q_RESERVES]) == '1'
  PEND = tostring(src[h + Q_PENDING]) == '1'
  P = {}
  for i = 1, STRIDE * NL do P[i] = tonumber(src[h + QHEAD + i]) end
  BAKEDREAD = src == BAKED
  return a + QHEAD + STRIDE * NL
end

-- Pending reservations: s.qa, s.qc their release times and costs, in
-- order of release, s.h the units they hold; the field F_PENDING holds
-- them, QLEN digits each (TW of release time, then the cost).
local function pending(s, q)
  local qa, qc, h = {}, {}, 0
  if q then
    for i = 1, #q - QLEN + 1, QLEN do
      local n = #qa + 1
      qa[n], qc[n] = tonumber(sub(q, i, i + TW - 1)), tonumber(sub(q, i + TW, i + QLEN - 1))
      h = h + qc[n]
    end
  end
  s.qa, s.qc, s.h = qa, qc, h
end

-- qstring writes s's pending reservations as the field F_PENDING.
local function qstring(s)
  local parts = {}
  for i = 1, #s.qa do parts[i] = fmt(QFMT, s.qa[i], s.qc[i]) end
  return table.concat(parts)
end
