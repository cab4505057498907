-- fast: take.lua for the common call, leaner: one key, no request ID, a
-- plain Take (no grant up to a cost, no reservation). It reads and writes
-- the same fields and replies in the same layout as take.lua, which
-- store/redis.go sends for every other call, but reads fewer of them (not
-- the reservation's release, which only take.lua and refund.lua use; the
-- penalty's limit only while a penalty runs).
-- BakeFast wraps it, with counters.lua, in a function general(now, v) and
-- puts before it code written for the one policy (see hot.go) that answers
-- an admitted call itself and hands every other one over here, with the
-- time it read (now) and the reply of its HMGET (v), which asks for the
-- same fields as fields() below; either is nil when not read yet.
-- KEYS[1]: the identity's hash. ARGV: now (µs; 0 = read Redis TIME), cost,
-- resend ID ('' none; see counters.lua).
if not now then
  now = tonumber(ARGV[1])
  if now == 0 then
    local tm = redis.call('TIME')
    now = tm[1] * 1000000 + tm[2]
  end
end
local cost, key = tonumber(ARGV[2]), KEYS[1]
local rid, resent, horizon = resend(ARGV[3])

-- The pending reservations (q) are read only under a policy that reserves.
local f, ch = {1, 'b', 'x', 'd', 'g'}, {}
if RES then f[6] = 'q' end
local m = fields(f, ch, #f, now)
for i = 1, m do
  if type(f[i]) == 'number' then f[i] = fmt('%d', f[i]) end
end
local flags = 0
if not v then v = redis.pcall('HMGET', key, unpack(f)) end
if v.err then
  if not string.find(v.err, 'WRONGTYPE', 1, true) then return v end
  redis.log(redis.LOG_WARNING, 'ratelimit: ' .. key .. ' held another type; replaced with fresh counters')
  redis.call('DEL', key)
  flags, v = 2, {}
end
local s = {tonumber(v[1]) or 0}
local sb, sx, d, sg = tonumber(v[2]) or 0, tonumber(v[3]) or 0, v[4], tonumber(v[5]) or 0
local base = 6
if RES then pending(s, v[6]); base = 7 else pending(s, nil) end
for i = base, m do
  if ch[i] then s[tonumber(f[i])] = v[i] or false else s[tonumber(f[i])] = tonumber(v[i]) or 0 end
end

local c1 = cost
if c1 == 0 then c1 = 1 end
local t0 = now
if s[1] > t0 then t0 = s[1] end
local out = {0, now, 0, 0, flags, 0, t0, sg}

-- A resend of a call that charged: admitted, and charged nothing again
-- (see take.lua).
if resent and not resendfound(d, rid) and resendlost(d, now, horizon) then return redis.error_reply(RESEND_LOST) end
if resent and resendfound(d, rid) then
  out[1], out[3], out[6], out[8] = 1, cost, 3, 0
  for i = 0, NL - 1 do
    local u, tot, av = evaluate(s, key, 7 * i, t0, c1)
    local rem, reset = report(s, key, 7 * i, t0, u, tot, av, 0)
    local p = 9 + 4 * i
    out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, 0, 0
  end
  return out
end

local EU, ET, EA, ER = {}, {}, {}, {}
local allowed = sb <= t0
for i = 1, NL do
  local u, tot, av, r = evaluate(s, key, 7 * (i - 1), t0, c1)
  EU[i], ET[i], EA[i], ER[i] = u, tot, av, r
  if r ~= 0 then allowed = false end
end
local charged = 0
if allowed then
  charged = cost
  out[1], out[3] = 1, cost
end
for i = 0, NL - 1 do
  local rem, reset = report(s, key, 7 * i, t0, EU[i + 1], ET[i + 1], EA[i + 1], charged)
  local p = 9 + 4 * i
  out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, ER[i + 1], 0
end
local w, wo, changed = {}, 1, false
if charged > 0 then
  local folded
  wo, folded = fold(s, key, t0, w, wo)
  for i = 0, NL - 1 do
    wo = charge(s, key, 7 * i, t0, EU[i + 1], ET[i + 1], charged, w, wo)
    if P[7 * i + 1] == 3 then out[12 + 4 * i] = s[P[7 * i + 6]] end
  end
  if folded then w[wo], w[wo + 1], wo = 'q', qstring(s), wo + 2 end
  w[wo], w[wo + 1], wo = 1, fmt('%d', t0), wo + 2
  if rid ~= '' then w[wo], w[wo + 1], wo = 'd', resendrecord(d, rid, now), wo + 2 end
  out[6] = 1
  changed = true
end
local sl, skew, need = 0, 0, t0 + TTL * 1000
if sb > t0 then sl = tonumber(redis.call('HGET', key, 'l')) or 0 end
if t0 > now then skew = t0 - now end
if #s.qa > 0 and s.qa[#s.qa] + TTL * 1000 > need then need = s.qa[#s.qa] + TTL * 1000 end
settle(key, out, 6, w, wo, changed, sb, sl, t0, not allowed and cost > 0, skew, need, sx, now)
return out
