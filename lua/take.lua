-- take: check every limit for every key; only if all have room, charge all.
-- Preceded by one algorithm's check/report/charge functions.
-- KEYS: one hash per identity. ARGV: now (µs; 0 = read Redis TIME), cost,
-- then, unless the script opens with them baked in (TTL, NF, NL, P): ttl
-- (ms), number of fields, number of limits, then 4 numbers per limit.
-- Returns {allowed, then per key: time, then per limit: remaining, reset, retry}.
-- Lean on purpose: few tables, no per-limit tables, no string work but the
-- formatting of times.
local tonumber, floor = tonumber, math.floor
local now = tonumber(ARGV[1])
if now == 0 then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
end
local cost, ttl, nf, nl = tonumber(ARGV[2]), TTL, NF, NL
if not P then
  ttl, nf, nl, P = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), {}
  for a = 1, 4 * nl do P[a] = tonumber(ARGV[5 + a]) end
end
local c1 = cost
if c1 == 0 then c1 = 1 end
local nk = #KEYS
local S, U, R = {}, {}, {} -- per key: fields read (time at nf+1); per key and limit: used, retry
local allowed = true
for k = 1, nk do
  local s = fetch(KEYS[k], now, nf, P, nl)
  local t = now
  if s[1] > t then t = s[1] end
  s[nf + 1] = t
  S[k] = s
  local x = (k - 1) * nl
  for i = 1, nl do
    local u, r = check(s, t, P, 4 * (i - 1), c1, KEYS[k])
    U[x + i], R[x + i] = u, r
    if r ~= 0 then allowed = false end
  end
end
local charged = 0
if allowed then charged = cost end
local out, o = {0}, 2
if allowed then out[1] = 1 end
for k = 1, nk do
  local s = S[k]
  local t, x = s[nf + 1], (k - 1) * nl
  out[o], o = t, o + 1
  local sk = t - now -- > 0 when the clock stepped back: waits get longer by it
  for i = 1, nl do
    local rem, reset = report(s, t, P, 4 * (i - 1), U[x + i], charged, KEYS[k])
    local retry = R[x + i]
    if sk > 0 then
      if retry > 0 then retry = retry + sk end
      if reset > 0 then reset = reset + sk end
    end
    out[o], out[o + 1], out[o + 2], o = rem, reset, retry, o + 3
  end
  if charged > 0 then
    local w, wo = {1, string.format('%d', t)}, 3
    for i = 1, nl do wo = charge(s, t, P, 4 * (i - 1), U[x + i], charged, w, wo, KEYS[k]) end
    -- The key must outlive this charge by ttl. Field x holds when it
    -- expires; only when less than ttl is left is it pushed to 1.25 ttl,
    -- so a busy key is refreshed once per quarter ttl, not every call.
    if s.x - t < ttl * 1000 then
      w[wo], w[wo + 1] = 'x', string.format('%d', t + ttl * 1250)
      redis.call('HSET', KEYS[k], unpack(w))
      redis.call('PEXPIRE', KEYS[k], ttl + floor(ttl / 4))
    else
      redis.call('HSET', KEYS[k], unpack(w))
    end
  end
end
return out
