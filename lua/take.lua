-- take: decide one request for every key; only if every limit of every key
-- has room (or, reserving, will have by the maximum delay) charge them all.
-- Mirrors store/engine.go (run) and the memory store's do. Preceded by
-- counters.lua.
-- KEYS: one hash per identity; then, when the request has an ID, one ID
-- record (a hash: n repeats, e expiry µs, v the first answer) per identity.
-- ARGV: now (µs; 0 = read Redis TIME), cost, mode ('1': grant up to cost),
-- max delay (µs; > 0 reserves), resend ID ('' none; see resend below), has
-- ID ('1'), then,
-- unless the script opens with them baked in: TTL (ms), NL, BLOCK (µs),
-- IDTTL (µs), RES ('1' when every limit can reserve), 7 numbers per limit.
-- Reply: {allowed, now, granted, release, flags (2: a key of another type
-- was replaced), then per key: kind (0 decided, 1 charged, 2 answered by its
-- ID record, 3 a resend of a charged call), at, the key's refund count, then
-- per limit: remaining, reset, retry, mark (the token bucket's TAT after a
-- charge, else 0)}.
local tonumber, floor, ceil, fmt, sub = tonumber, math.floor, math.ceil, string.format, string.sub
local MAXREP = 3
local now = tonumber(ARGV[1])
if now == 0 then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
end
local cost, upto, maxd, hasid = tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4]), ARGV[6] == '1'
local rid, resent, horizon = resend(ARGV[5])
if not P then
  TTL, NL, BLOCK, IDTTL, RES, P = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11] == '1', {}
  for a = 1, 7 * NL do P[a] = tonumber(ARGV[11 + a]) end
end
local nk = #KEYS
if hasid then nk = nk / 2 end

-- Read each key's fields: its ID record first (a repeat is not decided
-- again), then the fields the allow path needs; more load on demand.
local S, REC, RECE, D, nd, flags = {}, {}, {}, {}, 0, 0
for k = 1, nk do
  if hasid then
    local r = redis.call('HMGET', KEYS[nk + k], 'n', 'e', 'v')
    local n, e = tonumber(r[1]) or 0, tonumber(r[2])
    RECE[k] = e
    if r[3] and e and e > now and n < MAXREP then
      -- A key under a running penalty is decided again, whatever its ID
      -- was answered before: a block holds against repeats.
      local b = redis.pcall('HMGET', KEYS[k], 'b', '1')
      local sb, s1 = 0, 0
      if not b.err then sb, s1 = tonumber(b[1]) or 0, tonumber(b[2]) or 0 end
      if sb <= now or sb <= s1 then
        redis.call('HINCRBY', KEYS[nk + k], 'n', 1)
        REC[k] = r[3]
      end
    end
  end
  if not REC[k] then
    local f, ch = {1, 'b', 'l', 'q', 'x', 'd', 'g'}, {}
    local m = fields(f, ch, 7, now)
    local v = redis.pcall('HMGET', KEYS[k], unpack(f))
    if v.err then
      if not string.find(v.err, 'WRONGTYPE', 1, true) then return v end
      -- Our own key under our prefix, overwritten with another type:
      -- start it afresh rather than fail every request for it.
      redis.log(redis.LOG_WARNING, 'ratelimit: ' .. KEYS[k] .. ' held another type; replaced with fresh counters')
      redis.call('DEL', KEYS[k])
      flags, v = 2, {}
    end
    local s = {}
    s[1], s.b, s.l, s.x, s.d, s.g = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[5]) or 0, v[6], tonumber(v[7]) or 0
    pending(s, v[4])
    for i = 8, m do
      if ch[i] then s[f[i]] = v[i] or false else s[f[i]] = tonumber(v[i]) or 0 end
    end
    S[k] = s
    nd = nd + 1
    D[nd] = k
  end
end

local c1 = cost
if c1 == 0 then c1 = 1 end

-- A resend of a call that charged (go-redis sent the script again after
-- losing its reply): charge nothing again. A plain take was admitted; a
-- grant or a reservation is reported as not granted, since its answer is
-- not kept. A resend found on no key either was not charged the first time
-- (then it is decided now) or was pushed out of every key's list of IDs:
-- when a key pushed an ID out within the horizon, which one cannot be
-- told, and the call fails rather than charge twice.
if resent then
  for x = 1, nd do
    if resendfound(S[D[x]].d, rid) then
      local plain = not upto and maxd == 0
      local out = {0, now, 0, 0, flags}
      if plain then out[1], out[3] = 1, cost end
      for k = 1, nk do
        local o = 6 + (k - 1) * (3 + 4 * NL)
        local s = S[k]
        out[o], out[o + 1], out[o + 2] = 3, 0, 0
        for i = 0, NL - 1 do
          local j, p = 7 * i, o + 3 + 4 * i
          out[p], out[p + 1], out[p + 2], out[p + 3] = 0, 0, 0, 0
          if s then
            local t = now
            if s[1] > t then t = s[1] end
            out[o + 1] = t
            local u, tot, av, r = evaluate(s, KEYS[k], j, t, c1)
            local rem, reset = report(s, KEYS[k], j, t, u, tot, av, 0)
            if plain then r = 0 end
            out[p], out[p + 1], out[p + 2] = rem, reset, r
          end
        end
      end
      return out
    end
  end
  for x = 1, nd do
    if resendlost(S[D[x]].d, now, horizon) then return redis.error_reply(RESEND_LOST) end
  end
end

-- Decide (store/engine.go, run).
local EU, ET, EA, ER, T0, T = {}, {}, {}, {}, {}, {}
local blocked = false
for x = 1, nd do
  local k = D[x]
  local s = S[k]
  local t0 = now
  if s[1] > t0 then t0 = s[1] end
  T0[k], T[k] = t0, t0
  if s.b > t0 then blocked = true end
end
local granted = cost
if upto then
  for x = 1, nd do
    local k = D[x]
    for i = 0, NL - 1 do
      local q = (k - 1) * NL + i + 1
      EU[q], ET[q], EA[q], ER[q] = evaluate(S[k], KEYS[k], 7 * i, T0[k], 1)
      if EA[q] < granted then granted = EA[q] end
    end
  end
  if blocked then granted = 0 end
  if granted > 0 then
    c1 = granted
    for x = 1, nd do
      for i = 0, NL - 1 do ER[(D[x] - 1) * NL + i + 1] = 0 end
    end
  end
else
  for x = 1, nd do
    local k = D[x]
    for i = 0, NL - 1 do
      local q = (k - 1) * NL + i + 1
      EU[q], ET[q], EA[q], ER[q] = evaluate(S[k], KEYS[k], 7 * i, T0[k], c1)
    end
  end
end
local allowed = not blocked and (not upto or granted > 0)
for x = 1, nd do
  for i = 0, NL - 1 do
    if ER[(D[x] - 1) * NL + i + 1] ~= 0 then allowed = false end
  end
end
local release = 0
local full = false -- a key keeps as many pending reservations as it may
for x = 1, nd do
  if #S[D[x]].qa >= MAXQ then full = true end
end
if not allowed and maxd > 0 and cost > 0 and not upto and not blocked and not full and RES and nd > 0 then
  -- Reserve: admitted when the last limit has room, if within maxd.
  local never = false
  release = now
  for x = 1, nd do
    local k = D[x]
    for i = 0, NL - 1 do
      local r = ER[(k - 1) * NL + i + 1]
      if r < 0 then never = true elseif T0[k] + r > release then release = T0[k] + r end
    end
  end
  if not never and release - now <= maxd then
    allowed = true
    for x = 1, nd do
      local k = D[x]
      T[k] = release
      if T0[k] > release then T[k] = T0[k] end
      for i = 0, NL - 1 do
        local q = (k - 1) * NL + i + 1
        EU[q], ET[q], EA[q], ER[q] = evaluate(S[k], KEYS[k], 7 * i, T[k], c1)
      end
    end
  else
    release = 0
  end
end
local charged = 0
if allowed then
  charged = cost
  if upto then charged = granted end
else
  granted = 0
end

-- numbers splits an ID record's answer: granted, at, then per limit
-- remaining, reset, retry.
local function numbers(str)
  local v, n = {}, 0
  for x in string.gmatch(str, '%S+') do
    n = n + 1
    v[n] = tonumber(x)
  end
  return v
end
local out = {1, now, charged, release, flags}
if not allowed then out[1] = 0 end
if nd == 0 then
  -- Every key answered by its ID record: the first answer, as it was.
  out[3] = numbers(REC[1])[1]
end
local ttl = TTL * 1000
for k = 1, nk do
  local o = 6 + (k - 1) * (3 + 4 * NL)
  if REC[k] then
    local v = numbers(REC[k])
    out[o], out[o + 1], out[o + 2] = 2, v[2], 0
    for i = 0, NL - 1 do
      local p = o + 3 + 4 * i
      out[p], out[p + 1], out[p + 2], out[p + 3] = v[3 + 3 * i], v[4 + 3 * i], v[5 + 3 * i], 0
    end
  else
    local s, key, t0, t = S[k], KEYS[k], T0[k], T[k]
    out[o], out[o + 1], out[o + 2] = 0, t, s.g
    for i = 0, NL - 1 do
      local q, p = (k - 1) * NL + i + 1, o + 3 + 4 * i
      local rem, reset = report(s, key, 7 * i, t, EU[q], ET[q], EA[q], charged)
      out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, ER[q], 0
    end
    local w, wo, changed = {}, 1, false
    if charged > 0 then
      -- Reservations released by t0 join the fields first; a place in
      -- line stays pending (see store/engine.go).
      local folded
      wo, folded = fold(s, key, t0, w, wo)
      if t > t0 then
        reserve(s, t, charged)
        for i = 0, NL - 1 do
          if P[7 * i + 1] == 3 then out[o + 6 + 4 * i] = t + charged * P[7 * i + 3] end
        end
      else
        for i = 0, NL - 1 do
          local q = (k - 1) * NL + i + 1
          wo = charge(s, key, 7 * i, t, EU[q], ET[q], charged, w, wo)
          if P[7 * i + 1] == 3 then out[o + 6 + 4 * i] = s[P[7 * i + 6]] end
        end
      end
      if folded or t > t0 then w[wo], w[wo + 1], wo = 'q', qstring(s), wo + 2 end
      w[wo], w[wo + 1], wo = 1, fmt('%d', t0), wo + 2
      if rid ~= '' then w[wo], w[wo + 1], wo = 'd', resendrecord(s.d, rid, now), wo + 2 end
      out[o] = 1
      changed = true
    end
    -- Penalties, a clock that stepped back, the write and the expiry: the
    -- key must outlive what it records by ttl.
    local skew, need = 0, t0 + ttl
    if release == 0 and t0 > now then skew = t0 - now end
    if t > t0 then need = t + ttl end
    if #s.qa > 0 and s.qa[#s.qa] + ttl > need then need = s.qa[#s.qa] + ttl end
    settle(key, out, o, w, wo, changed, s.b, s.l, t0, not allowed and cost > 0, skew, need, s.x, now)
    if hasid and charged > 0 and not (RECE[k] and RECE[k] > now) then
      local v = {charged, t}
      for i = 0, NL - 1 do
        local p = o + 3 + 4 * i
        v[3 + 3 * i], v[4 + 3 * i], v[5 + 3 * i] = out[p], out[p + 1], out[p + 2]
      end
      for i = 1, #v do v[i] = fmt('%d', v[i]) end
      redis.call('HSET', KEYS[nk + k], 'n', 0, 'e', fmt('%d', now + IDTTL), 'v', table.concat(v, ' '))
      redis.call('PEXPIRE', KEYS[nk + k], ceil(IDTTL / 1000) + 1)
    end
  end
end
return out
