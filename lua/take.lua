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
-- out: {allowed, per key: time, per limit: remaining, reset, retry}. The
-- check pass parks each limit's "used" in its remaining slot and its retry
-- in its retry slot; the second pass turns them into the reply.
local out, allowed, S, s1 = {1}, true, nil, nil -- S: fields read per key, when several
if nk > 1 then S = {} end
local o = 2
for k = 1, nk do
  local s = fetch(KEYS[k], now, nf, P, nl)
  local t = now
  if s[1] > t then t = s[1] end
  if S then S[k] = s else s1 = s end
  out[o] = t
  for j = 0, 4 * (nl - 1), 4 do
    local u, r = check(s, t, P, j, c1, KEYS[k])
    out[o + 1], out[o + 2], out[o + 3] = u, 0, r
    if r ~= 0 then allowed = false end
    o = o + 3
  end
  o = o + 1
end
local charged = 0
if allowed then charged = cost else out[1] = 0 end
o = 2
for k = 1, nk do
  local s = s1
  if S then s = S[k] end
  local t = out[o]
  local sk = t - now -- > 0 when the clock stepped back: waits get longer by it
  local w, wo
  if charged > 0 then w, wo = {1, string.format('%d', t)}, 3 end
  for j = 0, 4 * (nl - 1), 4 do
    local used, retry = out[o + 1], out[o + 3]
    local rem, reset = report(s, t, P, j, used, charged, KEYS[k])
    if sk > 0 then
      if retry > 0 then retry = retry + sk end
      if reset > 0 then reset = reset + sk end
    end
    out[o + 1], out[o + 2], out[o + 3] = rem, reset, retry
    if w then wo = charge(s, t, P, j, used, charged, w, wo, KEYS[k]) end
    o = o + 3
  end
  o = o + 1
  if w then
    -- The key must outlive this charge by ttl. Field x holds when it
    -- expires; only when less than ttl is left is it pushed to 1.25 ttl,
    -- so a busy key is refreshed once per quarter ttl, not every call.
    if s[nf + 1] - t < ttl * 1000 then
      w[wo], w[wo + 1] = 'x', string.format('%d', t + ttl * 1250)
      redis.call('HSET', KEYS[k], unpack(w))
      redis.call('PEXPIRE', KEYS[k], ttl + floor(ttl / 4))
    else
      redis.call('HSET', KEYS[k], unpack(w))
    end
  end
end
return out
