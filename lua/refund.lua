-- refund.lua: the refund operation (see script.lua).

-- refund takes back from one limit (base j) what a charge of cost c at
-- time at still counts at now, never below zero and never another
-- charge's units (see store/memory's refund), appending the changed fields
-- to out from index o.
local function refund(s, key, j, now, at, c, mark, samegen, out, o)
  local kind, w, off = P[j + P_KIND], P[j + P_WIDTH], P[j + P_HASH]
  if kind == K_BUCKETS then
    local n1 = P[j + P_N] + 1
    local b, h = floor(at / w), floor(s[I_TIME] / w)
    if b <= h and b > h - n1 then
      local x = off + 1 + b % n1
      local back = s[x]
      if back > c then back = c end
      if back > 0 then
        s[x], s[off] = s[x] - back, s[off] - back
        out[o], out[o + 1], out[o + 2], out[o + 3], o = x, bencode(s[x], s[-x], w), off, s[off], o + 4
      end
    end
  elseif kind == K_FIXED then
    if s[off] == floor(at / w) then
      local v = s[off + 1] - c
      if v < 0 then v = 0 end
      out[o], out[o + 1], o = off + 1, v, o + 2
    end
  elseif kind == K_TOKEN then
    -- A bucket written in another interval since (which bumps the refund
    -- count) gives nothing back either.
    if samegen and (s[off + 1] or 0) == w then
      local r = mark - s[I_TIME] -- every charge in the fields was made by s[I_TIME]
      if r < 0 then r = 0 end
      if r > c * w then r = c * w end
      out[o], out[o + 1], o = off, fmt('%d', s[off] - r), o + 2
    end -- else another refund came between: the bound does not hold; give nothing
  elseif kind == K_APPROX then
    local k = floor(at / w)
    if s[off] == k or s[off] == k + 1 then
      local f = off + 1
      if s[off] == k + 1 then f = off + 2 end
      local v = s[f] - c
      if v < 0 then v = 0 end
      out[o], out[o + 1], o = f, v, o + 2
    end
  elseif kind == K_LOG and at + P[j + P_PERIOD] > now then
    -- The log, while the charge counts: its units leave; units of the
    -- earlier of its oldest time and its newest minus a Period stand in
    -- for those it had replaced. The ring is as large as its pointer
    -- field says (a policy of the same ID with a larger rate may have
    -- grown it: log.lua's lrelay).
    local raw, per = s[off] or 0, P[j + P_PERIOD]
    s[off] = raw % LOGBASE
    local R = (raw - s[off]) / LOGBASE
    if raw == 0 then R = P[j + P_CAP] end
    if not s.ring then s.ring = {} end
    s.ring[j] = R
    local cs = lchunk(R)
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
        for q = ci * cs + 1, math.min((ci + 1) * cs, R) do parts[#parts + 1] = fmt(TFMT, keep[q]) end
        out[o], out[o + 1], o = off + 1 + ci, table.concat(parts), o + 2
      end
      out[o], out[o + 1], o = off, R * LOGBASE, o + 2
    end
  end
  return o
end

local now -- the call's time: ARGV[2], or Redis TIME (main sets it)

-- oprefund is the refund ('r').
local function oprefund()
  -- Refund: one charge (a Receipt), key by key.
  local cost = tonumber(ARGV[3])
  local base = 4
  if BAKED then policy(BAKED, 1) else base = policy(ARGV, 4) end
  -- The fields kept as they are (a log's chunks, true), decoded by
  -- bdecode (a sub-bucket's: its ring's width) or by ringsum (a ring's sum,
  -- RINGSUM).
  local chunk = {}
  -- A log's chunks are the fields after its pointer up to the next
  -- limit's first, or every later field after the last limit's: its ring
  -- may be larger than its capacity (log.lua's lrelay).
  local lastlog
  for j = 0, STRIDE * (NL - 1), STRIDE do
    if P[j + P_KIND] == K_LOG then
      local off = P[j + P_HASH]
      if j == STRIDE * (NL - 1) then
        lastlog = off
      else
        for f = off + 1, P[j + STRIDE + P_HASH] - 1 do chunk[f] = true end
      end
    elseif P[j + P_KIND] == K_BUCKETS then
      chunk[P[j + P_HASH]] = RINGSUM
      for b = 1, P[j + P_N] + 1 do chunk[P[j + P_HASH] + b] = P[j + P_WIDTH] end
    end
  end
  local done = 0
  for k = 1, #KEYS do
    local key = KEYS[k]
    local m = base + (k - 1) * (2 + NL)
    local at, gen = tonumber(ARGV[m]), tonumber(ARGV[m + 1])
    local raw = redis.pcall('HGETALL', key)
    if not raw.err and #raw > 0 then
      local g = 0
      for i = 1, #raw, 2 do
        if raw[i] == F_GEN then g = tonumber(raw[i + 1]) or 0 end
      end
      -- A charge made before a Reset (another epoch in the high bits of
      -- F_GEN) no longer counts: nothing to give back.
      if floor(g / EPOCH) ~= floor(gen / EPOCH) then raw = {} end
    end
    if not raw.err and #raw > 0 then
      local s, q = {}, nil
      for i = 1, #raw, 2 do
        local f, v = raw[i], raw[i + 1]
        local fn = tonumber(f)
        if fn and lastlog and fn > lastlog then chunk[fn] = true end
        if fn and chunk[fn] == true then s[fn] = v elseif fn and chunk[fn] == RINGSUM then s[fn] = ringsum(v) elseif fn and chunk[fn] then bdecode(s, fn, v, chunk[fn]) elseif fn then s[fn] = tonumber(v) elseif f == F_PENDING then q = v elseif f == F_GEN then s.gen = tonumber(v) end
      end
      s[I_TIME], s.gen = s[I_TIME] or 0, s.gen or 0
      pending(s, q)
      local at_q = 0
      for i = 1, #s.qa do
        if s.qa[i] == at then at_q = i end
      end
      if at_q > 0 then
        -- A place in line still pending: its units leave the line,
        -- exactly; the fields never held them.
        local back = cost
        if back > s.qc[at_q] then back = s.qc[at_q] end
        s.qc[at_q] = s.qc[at_q] - back
        if s.qc[at_q] == 0 then
          table.remove(s.qa, at_q)
          table.remove(s.qc, at_q)
        end
        redis.call('HSET', key, F_PENDING, qstring(s))
        done = done + 1
      elseif at > s[I_TIME] then
        -- A place in line no longer where it was (a lease moved later when
        -- the line was full: counters.lua's place): nothing is given back
        -- (store/memory's Refund).
      else
        for j = 0, STRIDE * (NL - 1), STRIDE do
          local kind, off, n = P[j + P_KIND], P[j + P_HASH], 0
          if kind == K_BUCKETS then n = P[j + P_N] + 1 elseif kind == K_FIXED then n = 1 elseif kind == K_APPROX then n = 2 end
          for f = off, off + n do s[f] = s[f] or 0 end
          if kind == K_BUCKETS then
            for f = off + 1, off + n do s[-f] = s[-f] or 0 end
          end
        end
        local w, o = {}, 1
        -- A drained token bucket gives nothing back (drained).
        local same = s.gen == gen and not drained(s, now)
        for i = 0, NL - 1 do o = refund(s, key, STRIDE * i, now, at, cost, tonumber(ARGV[m + 2 + i]), same, w, o) end
        w[o], w[o + 1] = F_GEN, s.gen + 1
        redis.call('HSET', key, unpack(w))
        if o > 1 then done = done + 1 end
      end
    end
  end
  return done
end
