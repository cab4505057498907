-- refund: take back one charge (a Receipt) as far as it still counts, never
-- below zero and never another charge's units. Mirrors store/algorithm.go
-- (refund). Preceded by counters.lua.
-- KEYS: the identities charged. ARGV: now (µs; 0 = read Redis TIME), cost,
-- NL, 7 numbers per limit, then per key: the time of the charge, the key's
-- refund count then, and one mark per limit (the token bucket's TAT right
-- after the charge).
local tonumber, floor, ceil, fmt = tonumber, math.floor, math.ceil, string.format
local EPOCH = 4294967296 -- one Reset in the field g (store/algorithm.go, genEpoch)

local function refund(s, key, j, now, at, c, tat, samegen, out, o)
  local kind, w, off = P[j + 1], P[j + 3], P[j + 6]
  if kind == 0 then
    local n1 = P[j + 4] + 1
    local b, h = floor(at / w), floor(s[1] / w)
    if b <= h and b > h - n1 then
      local x = off + 1 + b % n1
      local back = s[x]
      if back > c then back = c end
      if back > 0 then
        s[x], s[off] = s[x] - back, s[off] - back
        out[o], out[o + 1], out[o + 2], out[o + 3], o = x, s[x], off, s[off], o + 4
      end
    end
  elseif kind == 2 then
    if s[off] == floor(at / w) then
      local v = s[off + 1] - c
      if v < 0 then v = 0 end
      out[o], out[o + 1], o = off + 1, v, o + 2
    end
  elseif kind == 3 and samegen then
    local r = tat - s[1] -- every charge in the fields was made by s[1]
    if r < 0 then r = 0 end
    if r > c * w then r = c * w end
    out[o], out[o + 1], o = off, fmt('%d', s[off] - r), o + 2
  elseif kind == 3 then
    -- another refund came between: the bound does not hold; give nothing
  elseif kind == 4 then
    local k = floor(at / w)
    if s[off] == k or s[off] == k + 1 then
      local f = off + 1
      if s[off] == k + 1 then f = off + 2 end
      local v = s[f] - c
      if v < 0 then v = 0 end
      out[o], out[o + 1], o = f, v, o + 2
    end
  elseif at + P[j + 5] > now then
    -- The log, while the charge counts: its units leave; units of the
    -- earlier of its oldest time and its newest minus a Period stand in
    -- for those it had replaced (see store/algorithm.go).
    local R, per, cs = P[j + 2], P[j + 5], P[j + 7]
    local ring, found = {}, 0
    for i = 0, R - 1 do
      local v = lslot(s, key, j, i)
      ring[i + 1] = v
      if v == at then found = found + 1 end
    end
    local take = found
    if c < take then take = c end
    if take > 0 then
      local keep, stand = {}, ring[R] - per
      if ring[1] < stand then stand = ring[1] end
      for i = 1, R do
        if ring[i] == at and take > 0 then take = take - 1 else keep[#keep + 1] = ring[i] end
      end
      while #keep < R do keep[#keep + 1] = stand end
      table.sort(keep)
      for ci = 0, ceil(R / cs) - 1 do
        local parts = {}
        for q = ci * cs + 1, math.min((ci + 1) * cs, R) do parts[#parts + 1] = fmt('%016d', keep[q]) end
        out[o], out[o + 1], o = off + 1 + ci, table.concat(parts), o + 2
      end
      out[o], out[o + 1], o = off, 0, o + 2
    end
  end
  return o
end

local now, cost, nl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if now == 0 then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
end
P, NL = {}, nl
for a = 1, 7 * NL do P[a] = tonumber(ARGV[3 + a]) end
local base = 3 + 7 * NL
local chunk = {}
for j = 0, 7 * (NL - 1), 7 do
  if P[j + 1] == 1 then
    for c = 1, ceil(P[j + 2] / P[j + 7]) do chunk[P[j + 6] + c] = true end
  end
end
local done = 0
for k = 1, #KEYS do
  local key = KEYS[k]
  local m = base + (k - 1) * (2 + NL)
  local at, gen = tonumber(ARGV[m + 1]), tonumber(ARGV[m + 2])
  local raw = redis.pcall('HGETALL', key)
  if not raw.err and #raw > 0 then
    local g = 0
    for i = 1, #raw, 2 do
      if raw[i] == 'g' then g = tonumber(raw[i + 1]) or 0 end
    end
    -- A charge made before a Reset (another epoch in g's high bits; see
    -- reset.lua) no longer counts: nothing to give back.
    if floor(g / EPOCH) ~= floor(gen / EPOCH) then raw = {} end
  end
  if not raw.err and #raw > 0 then
    local s = {}
    for i = 1, #raw, 2 do
      local f, v = raw[i], raw[i + 1]
      local fn = tonumber(f)
      if fn and chunk[fn] then s[fn] = v elseif fn then s[fn] = tonumber(v) elseif f == 'q' then s.qraw = v else s[f] = tonumber(v) end
    end
    s[1], s.g = s[1] or 0, s.g or 0
    pending(s, s.qraw)
    local q = 0
    for i = 1, #s.qa do
      if s.qa[i] == at then q = i end
    end
    if q > 0 then
      -- A place in line still pending: its units leave the line, exactly;
      -- the fields never held them.
      local back = cost
      if back > s.qc[q] then back = s.qc[q] end
      s.qc[q] = s.qc[q] - back
      if s.qc[q] == 0 then
        table.remove(s.qa, q)
        table.remove(s.qc, q)
      end
      redis.call('HSET', key, 'q', qstring(s))
      done = done + 1
    else
      for j = 0, 7 * (NL - 1), 7 do
        local kind, off, n = P[j + 1], P[j + 6], 0
        if kind == 0 then n = 2 * (P[j + 4] + 1) elseif kind == 2 then n = 1 elseif kind == 4 then n = 2 end
        for f = off, off + n do s[f] = s[f] or 0 end
      end
      local w, o = {}, 1
      for i = 0, NL - 1 do o = refund(s, key, 7 * i, now, at, cost, tonumber(ARGV[m + 3 + i]), s.g == gen, w, o) end
      w[o], w[o + 1] = 'g', s.g + 1
      redis.call('HSET', key, unpack(w))
      if o > 1 then done = done + 1 end
    end
  end
end
return done
