-- The Redis store's one script: take (decide and charge a request for every
-- key, all or nothing), refund (undo one charge) and reset (forget an
-- identity). It mirrors the memory store (store/memory), the reference:
-- the same state, laid out as internal/layout names it, the same integer
-- arithmetic (microseconds; the approximation's one weighted product in
-- IEEE doubles, computed in the same order), the same order of decisions.
-- The conformance suite (store/storetest) holds the two to identical
-- answers.
--
-- script.go puts before it a prelude of names (the kinds K_*, a limit's
-- parameters P_* and STRIDE, the hash fields F_*, and the numbers RIDLEN,
-- RIDN, QLEN, MAXQ, EPOCH, MAXREP) and the line "local BAKED = ...": nil,
-- or the policy as data (the numbers the unbaked script reads from ARGV).
--
-- ARGV[1] is the operation:
--   't' take. ARGV: now (µs; 0 = Redis TIME), cost, mode ('1': grant up to
--       cost), max delay (µs; > 0 reserves), resend ID ('' none; see
--       resend below), has ID ('1'), then the policy unless baked.
--   'f' take, the common call: one key, no request ID, a plain take.
--       ARGV: now, cost, resend ID, then the policy unless baked. It
--       replies as 't' does, by a leaner path.
--       KEYS: one hash per identity; then, when the request has an ID,
--       one ID record (a hash: n repeats, e expiry µs, v the first answer)
--       per identity. Reply: {allowed, now, granted, release, flags (2: a
--       key of another type was replaced), then per key: kind (0 decided,
--       1 charged, 2 answered by its ID record, 3 a resend of a charged
--       call), at, the key's refund count, then per limit: remaining,
--       reset, retry, mark (a token bucket's TAT right after a charge,
--       else 0)}.
--   'r' refund. ARGV: now, cost, the policy unless baked, then per key the
--       time of the charge, the key's refund count then, and one mark per
--       limit. KEYS: the identities charged. Reply: how many gave back.
--   'x' reset. ARGV: how long to keep the key (ms). KEYS[1]: the identity.
--       Reply: 1 when the key existed, else 0.
-- The policy: TTL (ms), NL (limits), BLOCK (µs), IDTTL (µs), RES ('1' when
-- every limit can reserve), then STRIDE numbers per limit (P_* order).
local tonumber, floor, ceil, fmt, sub, find = tonumber, math.floor, math.ceil, string.format, string.sub, string.find
local ZERO16 = '0000000000000000'
local OP = ARGV[1]

-- nm names the numbered hash field x: its digits, made without a printf
-- (Redis would turn a number argument into digits with a costlier one).
local char = string.char
local function nm(x)
  if x < 10 then return char(48 + x) end
  if x < 100 then return char(48 + floor(x / 10), 48 + x % 10) end
  return fmt('%d', x)
end

-- The lean path of the common call ('f', a baked policy): it answers a
-- call that every limit admits, on a key with no running penalty, no place
-- in line, no resend and a clock that did not step back, when each limit's
-- state is at hand (a sliding window charged in this sub-bucket or the
-- previous one, or never; a log charged one unit, its chunks read whole).
-- It reads what the general path reads and writes what it writes, in one
-- HMGET and one HSET, before any function of the general path is defined
-- (defining them costs a call more than this path does). Any other call
-- returns nil here, having written nothing, and goes on below.
if OP == 'f' and BAKED then repeat -- a break falls through to the general path
  local key, cost, rid = KEYS[1], tonumber(ARGV[3]), ARGV[4]
  if cost < 1 or sub(rid, 1, 1) == '!' then break end
  local now = tonumber(ARGV[2])
  if now == 0 then
    local tm = redis.call('TIME')
    now = tm[1] * 1000000 + tm[2]
  end
  local ttl, nl, ok = BAKED[1], BAKED[2], true
  local f, m = {'1', F_BLOCK, F_EXPIRY, F_RESENDS, F_GEN}, 5
  local lines = BAKED[5] == 1 -- places in line can be: they are read
  if lines then f[6], m = F_PENDING, 6 end
  local first = m + 1 -- the first limit's first field
  for i = 0, nl - 1 do
    local j = 5 + STRIDE * i
    local kind, off, w = BAKED[j + P_KIND], BAKED[j + P_HASH], BAKED[j + P_WIDTH]
    f[m + 1], m = nm(off), m + 1
    if kind == K_BUCKETS then
      local n1 = BAKED[j + P_N] + 1
      local a, b = off + 1 + floor(now / w) % n1, off + 1 + (floor(now / w) + 1) % n1
      f[m + 1], f[m + 2], f[m + 3], f[m + 4], m = nm(a), nm(a + n1), nm(b), nm(b + n1), m + 4
    elseif kind == K_LOG then
      local chunks = ceil(BAKED[j + P_CAP] / BAKED[j + P_CHUNK])
      if cost ~= 1 or chunks > 8 then
        ok = false
        break
      end
      for c = 1, chunks do f[m + c] = nm(off + c) end
      m = m + chunks
    elseif kind ~= K_TOKEN then
      f[m + 1], m = nm(off + 1), m + 1
      if kind == K_APPROX then f[m + 1], m = nm(off + 2), m + 1 end
    end
  end
  if not ok then break end
  local v = redis.pcall('HMGET', key, unpack(f))
  if v.err then break end
  local s1, sb, sx, d = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, v[4]
  if s1 > now or sb > now or lines and v[6] and v[6] ~= '' then break end
  local out = {1, now, cost, 0, 0, 1, now, tonumber(v[5]) or 0}
  local wr, o, x = {}, 1, first -- the write, its next index, the field read next
  for i = 0, nl - 1 do
    local j = 5 + STRIDE * i
    local kind, cap, w, per, off = BAKED[j + P_KIND], BAKED[j + P_CAP], BAKED[j + P_WIDTH], BAKED[j + P_PERIOD], BAKED[j + P_HASH]
    local k, rem, reset, mark = floor(now / w), 0, per, 0
    if kind == K_BUCKETS then
      local n1 = BAKED[j + P_N] + 1
      local tot, cur = 0, 0
      if s1 ~= 0 then
        local h = floor(s1 / w)
        tot, cur = tonumber(v[x]) or 0, tonumber(v[x + 1]) or 0
        if k > h then tot, cur = tot - cur, 0 end
        ok = k - h <= 1 -- else lapsed sub-buckets: the general path clears them
      end
      local used, edge = tot, tonumber(v[x + 3]) or 0
      if edge ~= 0 and (tonumber(v[x + 4]) or 0) <= now - k * w then used = used - edge end
      if not ok or used + cost > cap then
        ok = false
        break
      end
      rem = cap - used - cost
      local a = off + 1 + k % n1
      wr[o], wr[o + 1], wr[o + 2], wr[o + 3], wr[o + 4], wr[o + 5], o = nm(a), fmt('%d', cur + cost), nm(a + n1), fmt('%d', now - k * w), nm(off), fmt('%d', tot + cost), o + 6
      x = x + 5
    elseif kind == K_LOG then
      -- The units that stopped counting by now are the oldest: a search
      -- for how many; none, and a unit does not fit.
      local cs, ptr = BAKED[j + P_CHUNK], tonumber(v[x]) or 0
      local lo, hi = 0, cap
      while lo < hi do
        local mid = floor((lo + hi) / 2)
        local pos = (ptr + mid) % cap
        local c, at = v[x + 1 + floor(pos / cs)], pos % cs * 16
        local slot = 0
        if c and #c >= at + 16 then slot = tonumber(sub(c, at + 1, at + 16)) end
        if slot + per <= now then lo = mid + 1 else hi = mid end
      end
      local ci = floor(ptr / cs)
      local str, nsl = v[x + 1 + ci] or '', cs
      if (ci + 1) * cs > cap then nsl = cap - ci * cs end
      if lo == 0 or #str % 16 ~= 0 or #str > nsl * 16 then
        ok = false
        break
      end
      rem = lo - 1
      str = str .. string.rep('0', nsl * 16 - #str)
      local at = ptr % cs * 16
      wr[o], wr[o + 1], wr[o + 2], wr[o + 3], o = nm(off + 1 + ci), sub(str, 1, at) .. fmt('%016d', now) .. sub(str, at + 17), nm(off), fmt('%d', (ptr + 1) % cap), o + 4
      x = x + 1 + ceil(cap / cs)
    elseif kind == K_TOKEN then
      local tat = tonumber(v[x]) or 0
      if tat < now then tat = now end
      if (tat - now) + cost * w > cap * w then
        ok = false
        break
      end
      tat = tat + cost * w
      local left = cap * w - (tat - now)
      if left > 0 then rem = floor(left / w) end
      reset, mark = tat - now, tat
      wr[o], wr[o + 1], o = nm(off), fmt('%d', tat), o + 2
      x = x + 1
    else
      local win, used, prev = tonumber(v[x]) or 0, 0, 0
      if win == k then
        used = tonumber(v[x + 1]) or 0
        if kind == K_APPROX then prev = tonumber(v[x + 2]) or 0 end
      elseif win == k - 1 and kind == K_APPROX then
        prev = tonumber(v[x + 1]) or 0
      end
      local avail = cap - used
      if kind == K_APPROX then
        avail = floor((cap - used) - prev * (w - (now - k * w)) / w)
        reset = (k + 2) * w - now
      else
        reset = (k + 1) * w - now
      end
      if cost > avail then
        ok = false
        break
      end
      rem = avail - cost
      wr[o], wr[o + 1], wr[o + 2], wr[o + 3], o = nm(off), fmt('%d', k), nm(off + 1), fmt('%d', used + cost), o + 4
      if kind == K_APPROX then wr[o], wr[o + 1], o, x = nm(off + 2), fmt('%d', prev), o + 2, x + 1 end
      x = x + 2
    end
    local p = 9 + 4 * i
    out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, 0, mark
  end
  if not ok then break end
  wr[o], wr[o + 1], o = '1', fmt('%d', now), o + 2
  if rid ~= '' then
    -- The resend ID joins the key's list (as resendrecord does, below).
    local pt, ids = ZERO16, rid
    if d then pt, ids = sub(d, 1, 16), sub(d, 17) .. rid end
    if #ids > RIDLEN * RIDN then ids, pt = sub(ids, RIDLEN + 1), fmt('%016d', now) end
    wr[o], wr[o + 1], o = F_RESENDS, pt .. ids, o + 2
  end
  local need = now + ttl * 1000
  if sx < need then wr[o], wr[o + 1] = F_EXPIRY, fmt('%d', need + ttl * 250) end
  redis.call('HSET', key, unpack(wr))
  if sx < need then redis.call('PEXPIRE', key, ceil((need + ttl * 250 - now) / 1000) + 1) end
  do return out end
until true end

-- now is the time of the call: its argument, or Redis TIME.
local function clock(arg)
  local now = tonumber(arg)
  if now == 0 then
    local tm = redis.call('TIME')
    now = tm[1] * 1000000 + tm[2]
  end
  return now
end

if OP == 'x' then
  -- Reset: the key keeps only its field F_GEN, with the next epoch in its
  -- high bits (the low bits count refunds), for as long as a charge made
  -- before the Reset could still count: a refund of such a charge then
  -- finds another epoch and gives nothing back.
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  local keep = tonumber(ARGV[2])
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > keep then keep = pttl end
  local g = 0
  local v = redis.pcall('HGET', KEYS[1], F_GEN)
  if type(v) == 'string' then g = tonumber(v) or 0 end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], F_GEN, fmt('%d', (floor(g / EPOCH) + 1) * EPOCH))
  redis.call('PEXPIRE', KEYS[1], keep)
  return 1
end

-- The policy, baked or from ARGV from index a; a is then past it.
local TTL, NL, BLOCK, IDTTL, RES, P
local function policy(src, a)
  TTL, NL, BLOCK, IDTTL, RES = tonumber(src[a]), tonumber(src[a + 1]), tonumber(src[a + 2]), tonumber(src[a + 3]), tostring(src[a + 4]) == '1'
  P = {}
  for i = 1, STRIDE * NL do P[i] = tonumber(src[a + 4 + i]) end
  return a + 5 + STRIDE * NL
end

-- Resend IDs. Every call carries an ID (RIDLEN characters) that go-redis
-- writes again, prefixed with '!' and followed by the call's horizon (µs;
-- 0: none), when it sends the call again after losing its reply
-- (resend.go). A key's field F_RESENDS holds, after 16 digits of the time
-- its last ID was pushed out, the IDs of its last RIDN charges.
local RESEND_LOST = 'RESEND ratelimit: a resent call found no record of its first run (more charges of its key came between than the key remembers); nothing was charged'

-- resend splits the resend ID argument: the ID, whether this is a resend,
-- and the horizon within which its first run ran.
local function resend(arg)
  if sub(arg, 1, 1) ~= '!' then return arg, false, 0 end
  return sub(arg, 2, RIDLEN + 1), true, tonumber(sub(arg, RIDLEN + 2)) or 0
end

-- resendfound reports whether d lists the ID rid.
local function resendfound(d, rid)
  if not d or rid == '' then return false end
  local q = find(d, rid, 17, true)
  while q and (q - 17) % RIDLEN ~= 0 do q = find(d, rid, q + 1, true) end
  return q ~= nil
end

-- resendlost reports whether d may have pushed out an ID charged within
-- horizon of now (any time, for horizon 0).
local function resendlost(d, now, horizon)
  if not d then return false end
  local pt = tonumber(sub(d, 1, 16)) or 0
  return pt > 0 and (horizon == 0 or pt >= now - horizon)
end

-- resendrecord returns d with rid added, the oldest ID pushed out (and the
-- time noted) when it holds RIDN already.
local function resendrecord(d, rid, now)
  local pt, ids = ZERO16, ''
  if d then pt, ids = sub(d, 1, 16), sub(d, 17) end
  ids = ids .. rid
  if #ids > RIDLEN * RIDN then ids, pt = sub(ids, RIDLEN + 1), fmt('%016d', now) end
  return pt .. ids
end

-- Pending reservations: s.qa, s.qc their release times and costs, in
-- order of release, s.h the units they hold; the field F_PENDING holds
-- them, QLEN digits each (16 of release time, 10 of cost).
local function pending(s, q)
  local qa, qc, h = {}, {}, 0
  if q then
    for i = 1, #q - QLEN + 1, QLEN do
      local n = #qa + 1
      qa[n], qc[n] = tonumber(sub(q, i, i + 15)), tonumber(sub(q, i + 16, i + QLEN - 1))
      h = h + qc[n]
    end
  end
  s.qa, s.qc, s.h = qa, qc, h
end

-- qstring writes s's pending reservations as the field F_PENDING.
local function qstring(s)
  local parts = {}
  for i = 1, #s.qa do parts[i] = fmt('%016d%010d', s.qa[i], s.qc[i]) end
  return table.concat(parts)
end

-- The counters. s holds the fields of one identity read so far: s[1] the
-- time of the last charge; s.block, s.blocklim, s.expiry, s.resends,
-- s.gen the other identity fields; numbered fields from F_FIRST the
-- limits' own, as numbers, except a log's chunks (strings of 16-digit
-- times; false when the field does not exist); s.qa, s.qc, s.h the
-- pending reservations. A limit's parameters are P[j + P_*], j its base.

-- fields appends to f, from index m + 1, the fields a call reads up front
-- for every limit at time now: a sub-bucket ring's sum and the cost and
-- latest admission of the current and the next sub-bucket; a log's oldest
-- slot and, when it has few, its chunks (marked in ch: kept as strings); a
-- window's or a bucket's own fields. It returns the new m; other fields are
-- read on demand.
local function fields(f, ch, m, now)
  for j = 0, STRIDE * (NL - 1), STRIDE do
    local kind, off = P[j + P_KIND], P[j + P_HASH]
    if kind == K_BUCKETS then
      local n1, kb = P[j + P_N] + 1, floor(now / P[j + P_WIDTH])
      local a, b = off + 1 + kb % n1, off + 1 + (kb + 1) % n1
      f[m + 1], f[m + 2], f[m + 3], f[m + 4], f[m + 5], m = off, a, a + n1, b, b + n1, m + 5
    elseif kind == K_LOG then
      f[m + 1], m = off, m + 1
      local nch = ceil(P[j + P_CAP] / P[j + P_CHUNK])
      if nch <= 8 then
        for c = 1, nch do f[m + 1], ch[m + 1], m = off + c, true, m + 1 end
      end
    elseif kind == K_TOKEN then
      f[m + 1], m = off, m + 1
    elseif kind == K_FIXED then
      f[m + 1], f[m + 2], m = off, off + 1, m + 2
    else
      f[m + 1], f[m + 2], f[m + 3], m = off, off + 1, off + 2, m + 3
    end
  end
  return m
end

-- bload loads the cost and latest-admission fields of buckets from..to.
local function bload(s, key, j, from, to)
  local off, n1 = P[j + P_HASH], P[j + P_N] + 1
  local f, m = nil, 0
  for b = from, to do
    local x = off + 1 + b % n1
    if s[x] == nil then
      if not f then f = {} end
      f[m + 1], f[m + 2], m = x, x + n1, m + 2
    end
  end
  if m == 0 then return end
  local v = redis.call('HMGET', key, unpack(f))
  for i = 1, m do s[f[i]] = tonumber(v[i]) or 0 end
end

-- lslot returns the time of the i-th oldest slot of a log.
local function lslot(s, key, j, i)
  local R, off, cs = P[j + P_CAP], P[j + P_HASH], P[j + P_CHUNK]
  local pos = (s[off] + i) % R
  local f = off + 1 + floor(pos / cs)
  local c = s[f]
  if c == nil then
    c = redis.call('HGET', key, f)
    s[f] = c
  end
  if not c then return 0 end
  local o = (pos % cs) * 16
  if #c < o + 16 then return 0 end
  return tonumber(sub(c, o + 1, o + 16))
end

-- lunit returns the time of the i-th oldest of the last capacity units
-- of a log, its pending reservations' units coming after its slots.
local function lunit(s, key, j, i)
  local u = s.h + i
  local R = P[j + P_CAP]
  if u < R then return lslot(s, key, j, u) end
  u = u - R
  for q = 1, #s.qa do
    if u < s.qc[q] then return s.qa[q] end
    u = u - s.qc[q]
  end
end

-- lavail counts the last capacity units of a log (pending reservations
-- included) that stopped counting by t.
local function lavail(s, key, j, t)
  local lo, hi, per = 0, P[j + P_CAP], P[j + P_PERIOD]
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if lunit(s, key, j, mid) + per <= t then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- tat is a token bucket's theoretical arrival time with the pending
-- reservations charged in order of release.
local function tat(s, j)
  local x, w = s[P[j + P_HASH]], P[j + P_WIDTH]
  for q = 1, #s.qa do
    if x < s.qa[q] then x = s.qa[q] end
    x = x + s.qc[q] * w
  end
  return x
end

local function awin(s, j, t)
  local off, k = P[j + P_HASH], floor(t / P[j + P_WIDTH])
  local win = s[off]
  if win == k then return s[off + 1], s[off + 2] end
  if win == k - 1 then return 0, s[off + 1] end
  return 0, 0
end

-- aavail: the weighted product in doubles, in the order Go computes it.
local function aavail(j, t, cur, prev)
  local per = P[j + P_WIDTH]
  local e = t - floor(t / per) * per
  local est = prev * (per - e) / per
  local a = floor((P[j + P_CAP] - cur) - est)
  if a < 0 then return 0 end
  return a
end

local function aretry(s, j, t, cur, prev, c)
  local per, cap = P[j + P_WIDTH], P[j + P_CAP]
  local k = floor(t / per)
  local function fits(x)
    local a, b = awin(s, j, x)
    return aavail(j, x, a, b) >= c
  end
  local x
  local m = cap - cur - c
  if m >= 0 and prev > 0 then
    x = k * per + ceil(per - m * per / prev)
  elseif cur > 0 then
    x = (k + 1) * per + ceil(per - (cap - c) * per / cur)
  else
    x = (k + 1) * per
  end
  if x < t + 1 then x = t + 1 end
  if x > (k + 2) * per then x = (k + 2) * per end
  local i = 0
  while i < 64 and not fits(x) do x, i = x + 1, i + 1 end
  i = 0
  while i < 64 and x > t + 1 and fits(x - 1) do x, i = x - 1, i + 1 end
  return x - t
end

-- evaluate returns used, total, avail and retry of one limit at t for
-- cost c (see store/memory's evaluate).
local function evaluate(s, key, j, t, c)
  local kind, cap, w = P[j + P_KIND], P[j + P_CAP], P[j + P_WIDTH]
  local used, total, avail, retry = 0, 0, 0, 0
  if kind == K_LOG then
    avail = lavail(s, key, j, t)
    if c > cap then
      retry = -1
    else
      local free = lunit(s, key, j, c - 1) + P[j + P_PERIOD]
      if free > t then retry = free - t end
    end
  elseif kind == K_BUCKETS then
    local n, off = P[j + P_N], P[j + P_HASH]
    local n1 = n + 1
    local k, h = floor(t / w), floor(s[1] / w)
    if k - h < n1 then
      bload(s, key, j, h + 1, k + 1)
      total = s[off]
      for b = h + 1, k do total = total - s[off + 1 + b % n1] end
      used = total
      local es = off + 1 + (k + 1) % n1
      if s[es] ~= 0 and s[es + n1] <= t - k * w then used = used - s[es] end
    end
    avail = cap - used
    if c > cap then
      retry = -1
    elseif used + c > cap then
      bload(s, key, j, k - n, h)
      local need, freed = used + c - cap, 0
      for b = k - n, h do
        local x = off + 1 + b % n1
        if s[x] ~= 0 and not (b == k - n and s[x + n1] <= t - k * w) then
          freed = freed + s[x]
          if freed >= need then
            retry = (b + n) * w + s[x + n1] - t
            break
          end
        end
      end
    end
  elseif kind == K_FIXED then
    local off = P[j + P_HASH]
    if s[off] == floor(t / w) then used = s[off + 1] end
    avail = cap - used
    if c > cap then
      retry = -1
    elseif used + c > cap then
      retry = (floor(t / w) + 1) * w - t
    end
  elseif kind == K_TOKEN then
    used = tat(s, j)
    if used < t then used = t end
    local limit = cap * w
    local x = limit - (used - t)
    if x > 0 then avail = floor(x / w) end
    if c > cap then
      retry = -1
    else
      local nx = (used - t) + c * w
      if nx > limit then retry = nx - limit end
    end
  else
    used, total = awin(s, j, t)
    avail = aavail(j, t, used, total)
    if c > cap then
      retry = -1
    elseif c > avail then
      retry = aretry(s, j, t, used, total, c)
    end
  end
  return used, total, avail, retry
end

-- report returns the remaining cost and the time until the whole quota is
-- back, after charging ch at t.
local function report(s, key, j, t, used, total, avail, ch)
  local kind, w = P[j + P_KIND], P[j + P_WIDTH]
  local rem, reset = avail - ch, 0
  if kind == K_LOG then
    local newest = lunit(s, key, j, P[j + P_CAP] - 1)
    if ch > 0 and t > newest then newest = t end
    reset = newest + P[j + P_PERIOD] - t
    if reset < 0 then reset = 0 end
  elseif kind == K_BUCKETS then
    if ch > 0 then return rem, P[j + P_PERIOD] end
    if used == 0 then return rem, 0 end -- no counted bucket holds any cost
    local n, off = P[j + P_N], P[j + P_HASH]
    local n1 = n + 1
    local k, h = floor(t / w), floor(s[1] / w)
    if k - h >= n1 then return rem, 0 end
    bload(s, key, j, k - n, h)
    for b = h, k - n, -1 do
      local x = off + 1 + b % n1
      if s[x] ~= 0 and not (b == k - n and s[x + n1] <= t - k * w) then
        return rem, (b + n) * w + s[x + n1] - t
      end
    end
  elseif kind == K_FIXED then
    if used + ch > 0 then reset = (floor(t / w) + 1) * w - t end
  elseif kind == K_TOKEN then
    local ahead = (used - t) + ch * w -- the TAT after the charge, from t
    rem = 0
    local x = P[j + P_CAP] * w - ahead
    if x > 0 then rem = floor(x / w) end
    reset = ahead
  else
    local k = floor(t / w)
    if used + ch > 0 then
      reset = (k + 2) * w - t
    elseif total > 0 then
      reset = (k + 1) * w - t
    end
  end
  return rem, reset
end

-- lwrite sets the slots of positions pos..pos+c-1 (ring order) of a log to
-- the 16-digit time ts, appending the changed chunk fields to out.
local function lwrite(s, key, j, pos, c, ts, out, o)
  local R, off, cs = P[j + P_CAP], P[j + P_HASH], P[j + P_CHUNK]
  local i = 0
  while i < c do
    local p0 = (pos + i) % R
    local ci = floor(p0 / cs)
    local f = off + 1 + ci
    local str = s[f]
    if str == nil then str = redis.call('HGET', key, f) end
    if not str then str = '' end
    local nsl = cs
    if (ci + 1) * cs > R then nsl = R - ci * cs end
    local parts = {}
    for q = 0, nsl - 1 do
      if #str >= q * 16 + 16 then parts[q + 1] = sub(str, q * 16 + 1, q * 16 + 16) else parts[q + 1] = ZERO16 end
    end
    while i < c and floor(((pos + i) % R) / cs) == ci do
      parts[(pos + i) % R % cs + 1] = ts
      i = i + 1
    end
    str = table.concat(parts)
    s[f] = str
    out[o], out[o + 1], o = f, str, o + 2
  end
  return o
end

-- units appends the changed field, value pairs of c units charged at t to
-- a log or a token bucket from its fields alone (a charge now, or a
-- reservation folded in), keeping s up to date.
local function units(s, key, j, t, c, out, o)
  local off = P[j + P_HASH]
  if P[j + P_KIND] == K_TOKEN then
    local x = s[off]
    if x < t then x = t end
    s[off] = x + c * P[j + P_WIDTH]
    out[o], out[o + 1] = off, fmt('%d', s[off])
    return o + 2
  end
  local ptr = s[off]
  o = lwrite(s, key, j, ptr, c, fmt('%016d', t), out, o)
  s[off] = (ptr + c) % P[j + P_CAP]
  out[o], out[o + 1] = off, s[off]
  return o + 2
end

-- fold charges the pending reservations released by t into every limit's
-- fields, in order of release, before a charge at t; it reports whether
-- there were any.
local function fold(s, key, t, out, o)
  local n = 0
  while n < #s.qa and s.qa[n + 1] <= t do
    n = n + 1
    for i = 0, NL - 1 do o = units(s, key, STRIDE * i, s.qa[n], s.qc[n], out, o) end
    s.h = s.h - s.qc[n]
  end
  if n > 0 then
    local qa, qc = {}, {}
    for q = n + 1, #s.qa do qa[q - n], qc[q - n] = s.qa[q], s.qc[q] end
    s.qa, s.qc = qa, qc
  end
  return o, n > 0
end

-- reserve records a reservation of c units released at t, in order of
-- release (merged with one released at the same time).
local function reserve(s, t, c)
  local i = #s.qa
  while i > 0 and s.qa[i] > t do i = i - 1 end
  if i > 0 and s.qa[i] == t then
    s.qc[i] = s.qc[i] + c
  else
    table.insert(s.qa, i + 1, t)
    table.insert(s.qc, i + 1, c)
  end
  s.h = s.h + c
end

-- charge appends the changed field, value pairs of one limit charged c at
-- t (no earlier than any time its fields hold) to out from index o and
-- returns the next free index.
local function charge(s, key, j, t, used, total, c, out, o)
  local kind, w, off = P[j + P_KIND], P[j + P_WIDTH], P[j + P_HASH]
  if kind == K_LOG or kind == K_TOKEN then
    return units(s, key, j, t, c, out, o)
  elseif kind == K_BUCKETS then
    local n, n1 = P[j + P_N], P[j + P_N] + 1
    local k, h = floor(t / w), floor(s[1] / w)
    local lo = h + 1
    if lo < k - n then lo = k - n end
    if s[1] == 0 then lo = k end -- never charged: no sub-bucket to clear
    for b = lo, k - 1 do
      local x = off + 1 + b % n1
      if s[x] ~= 0 then
        s[x], s[x + n1] = 0, 0
        out[o], out[o + 1], out[o + 2], out[o + 3], o = x, 0, x + n1, 0, o + 4
      end
    end
    local x = off + 1 + k % n1
    if k > h then s[x] = 0 else bload(s, key, j, k, k) end
    s[x] = s[x] + c
    out[o], out[o + 1], out[o + 2], out[o + 3] = x, s[x], x + n1, t - k * w
    out[o + 4], out[o + 5] = off, total + c
    return o + 6
  elseif kind == K_FIXED then
    out[o], out[o + 1], out[o + 2], out[o + 3] = off, fmt('%d', floor(t / w)), off + 1, used + c
    return o + 4
  end
  out[o], out[o + 1], out[o + 2], out[o + 3] = off, fmt('%d', floor(t / w)), off + 1, used + c
  out[o + 4], out[o + 5] = off + 2, total
  return o + 6
end

-- settle finishes one key's part of a take reply (from index o: kind, at,
-- refund count, then 4 numbers per limit) and writes its fields. A running
-- penalty (until sb, reported on limit sl) denies and says how long it
-- lasts; else a denial that may start one (start) sets BLOCK on the limit
-- that waits longest. A clock that stepped back by skew lengthens every
-- wait by it. Then the changed fields w[1..wo-1] are written, as strings,
-- and the expiry (recorded in F_EXPIRY, now sx) is pushed a quarter ttl
-- past need when it falls short of it, so a busy key's expiry is refreshed
-- once per quarter ttl.
local function settle(key, out, o, w, wo, changed, sb, sl, t0, start, skew, need, sx, now)
  if sb > t0 then
    local p = o + 3 + 4 * sl
    local left = sb - t0
    if out[p + 2] >= 0 and out[p + 2] < left then out[p + 2] = left end
    if out[p + 1] < left then out[p + 1] = left end
    out[p] = 0
  elseif start and BLOCK > 0 then
    local worst
    for i = 0, NL - 1 do
      local r = out[o + 5 + 4 * i]
      if r > 0 and (not worst or r > out[o + 5 + 4 * worst]) then worst = i end
    end
    if worst then
      local p = o + 3 + 4 * worst
      if out[p + 2] < BLOCK then out[p + 2] = BLOCK end
      if out[p + 1] < BLOCK then out[p + 1] = BLOCK end
      out[p] = 0
      w[wo], w[wo + 1], w[wo + 2], w[wo + 3], wo = F_BLOCK, t0 + BLOCK, F_BLOCKLIM, worst, wo + 4
      changed = true
    end
  end
  if skew > 0 then
    for i = 0, NL - 1 do
      local p = o + 3 + 4 * i
      if out[p + 2] > 0 then out[p + 2] = out[p + 2] + skew end
      if out[p + 1] > 0 then out[p + 1] = out[p + 1] + skew end
    end
  end
  if not changed then return end
  if sx < need then
    w[wo], w[wo + 1], wo = F_EXPIRY, need + TTL * 250, wo + 2
  end
  for i = 1, wo - 1 do
    if type(w[i]) == 'number' then w[i] = fmt('%d', w[i]) end
  end
  redis.call('HSET', key, unpack(w))
  if sx < need then redis.call('PEXPIRE', key, ceil((need + TTL * 250 - now) / 1000) + 1) end
end

-- read returns the fields of one identity a take reads up front (f: the
-- identity's fields named in fs, then those of fields()), or nil and the
-- error reply of a failure other than WRONGTYPE; flag is 2 when a key of
-- another type was replaced.
local function read(key, fs, now)
  local f, ch = {}, {}
  for i = 1, #fs do f[i] = fs[i] end
  local m = fields(f, ch, #fs, now)
  local args = {}
  for i = 1, m do
    local x = f[i]
    if type(x) == 'number' then x = nm(x) end
    args[i] = x
  end
  local v = redis.pcall('HMGET', key, unpack(args))
  local flag = 0
  if v.err then
    if not find(v.err, 'WRONGTYPE', 1, true) then return nil, v end
    -- Our own key under our prefix, overwritten with another type:
    -- start it afresh rather than fail every request for it.
    redis.log(redis.LOG_WARNING, 'ratelimit: ' .. key .. ' held another type; replaced with fresh counters')
    redis.call('DEL', key)
    flag, v = 2, {}
  end
  local s = {}
  for i = #fs + 1, m do
    if ch[i] then s[f[i]] = v[i] or false else s[f[i]] = tonumber(v[i]) or 0 end
  end
  return s, v, flag
end

-- refund takes back from one limit (base j) what a charge of cost c at
-- time at still counts at now, never below zero and never another
-- charge's units (see store/memory's refund), appending the changed fields
-- to out from index o.
local function refund(s, key, j, now, at, c, mark, samegen, out, o)
  local kind, w, off = P[j + P_KIND], P[j + P_WIDTH], P[j + P_HASH]
  if kind == K_BUCKETS then
    local n1 = P[j + P_N] + 1
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
  elseif kind == K_FIXED then
    if s[off] == floor(at / w) then
      local v = s[off + 1] - c
      if v < 0 then v = 0 end
      out[o], out[o + 1], o = off + 1, v, o + 2
    end
  elseif kind == K_TOKEN then
    if samegen then
      local r = mark - s[1] -- every charge in the fields was made by s[1]
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
  elseif at + P[j + P_PERIOD] > now then
    -- The log, while the charge counts: its units leave; units of the
    -- earlier of its oldest time and its newest minus a Period stand in
    -- for those it had replaced.
    local R, per, cs = P[j + P_CAP], P[j + P_PERIOD], P[j + P_CHUNK]
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

local now = clock(ARGV[2])

if OP == 'r' then
  -- Refund: one charge (a Receipt), key by key.
  local cost = tonumber(ARGV[3])
  local base = 4
  if BAKED then policy(BAKED, 1) else base = policy(ARGV, 4) end
  local chunk = {}
  for j = 0, STRIDE * (NL - 1), STRIDE do
    if P[j + P_KIND] == K_LOG then
      for c = 1, ceil(P[j + P_CAP] / P[j + P_CHUNK]) do chunk[P[j + P_HASH] + c] = true end
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
        if fn and chunk[fn] then s[fn] = v elseif fn then s[fn] = tonumber(v) elseif f == F_PENDING then q = v elseif f == F_GEN then s.gen = tonumber(v) end
      end
      s[1], s.gen = s[1] or 0, s.gen or 0
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
      else
        for j = 0, STRIDE * (NL - 1), STRIDE do
          local kind, off, n = P[j + P_KIND], P[j + P_HASH], 0
          if kind == K_BUCKETS then n = 2 * (P[j + P_N] + 1) elseif kind == K_FIXED then n = 1 elseif kind == K_APPROX then n = 2 end
          for f = off, off + n do s[f] = s[f] or 0 end
        end
        local w, o = {}, 1
        for i = 0, NL - 1 do o = refund(s, key, STRIDE * i, now, at, cost, tonumber(ARGV[m + 2 + i]), s.gen == gen, w, o) end
        w[o], w[o + 1] = F_GEN, s.gen + 1
        redis.call('HSET', key, unpack(w))
        if o > 1 then done = done + 1 end
      end
    end
  end
  return done
end

-- Take: 't' any call, 'f' the common call (one key, no request ID, a
-- plain take), which carries fewer arguments and takes a leaner path.
local cost, upto, maxd, hasid, rid, resent, horizon
if OP == 'f' then
  cost, upto, maxd, hasid = tonumber(ARGV[3]), false, 0, false
  rid, resent, horizon = resend(ARGV[4])
  if BAKED then policy(BAKED, 1) else policy(ARGV, 5) end
else
  cost, upto, maxd, hasid = tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5]), ARGV[7] == '1'
  rid, resent, horizon = resend(ARGV[6])
  if BAKED then policy(BAKED, 1) else policy(ARGV, 8) end
end
local c1 = cost
if c1 == 0 then c1 = 1 end

if OP == 'f' then
  -- The common call, leaner: one key, no request ID, a plain take. It
  -- reads the penalty's limit only while a penalty runs, the pending
  -- reservations only under a policy that reserves, and replies as the
  -- general path below does.
  local key = KEYS[1]
  local fs = {1, F_BLOCK, F_EXPIRY, F_RESENDS, F_GEN}
  if RES then fs[6] = F_PENDING end
  local s, v, flags = read(key, fs, now)
  if not s then return v end
  s[1] = tonumber(v[1]) or 0
  local sb, sx, d, sg = tonumber(v[2]) or 0, tonumber(v[3]) or 0, v[4], tonumber(v[5]) or 0
  if RES then pending(s, v[6]) else pending(s, nil) end
  local t0 = now
  if s[1] > t0 then t0 = s[1] end
  local out = {0, now, 0, 0, flags, 0, t0, sg}
  -- A resend of a call that charged: admitted, and charged nothing again
  -- (see the general path).
  if resent and resendfound(d, rid) then
    out[1], out[3], out[6], out[8] = 1, cost, 3, 0
    for i = 0, NL - 1 do
      local u, tot, av = evaluate(s, key, STRIDE * i, t0, c1)
      local rem, reset = report(s, key, STRIDE * i, t0, u, tot, av, 0)
      local p = 9 + 4 * i
      out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, 0, 0
    end
    return out
  end
  if resent and resendlost(d, now, horizon) then return redis.error_reply(RESEND_LOST) end
  local EU, ET, EA, ER = {}, {}, {}, {}
  local allowed = sb <= t0
  for i = 1, NL do
    local u, tot, av, r = evaluate(s, key, STRIDE * (i - 1), t0, c1)
    EU[i], ET[i], EA[i], ER[i] = u, tot, av, r
    if r ~= 0 then allowed = false end
  end
  local charged = 0
  if allowed then
    charged = cost
    out[1], out[3] = 1, cost
  end
  for i = 0, NL - 1 do
    local rem, reset = report(s, key, STRIDE * i, t0, EU[i + 1], ET[i + 1], EA[i + 1], charged)
    local p = 9 + 4 * i
    out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, ER[i + 1], 0
  end
  local w, wo, changed = {}, 1, false
  if charged > 0 then
    local folded
    wo, folded = fold(s, key, t0, w, wo)
    for i = 0, NL - 1 do
      wo = charge(s, key, STRIDE * i, t0, EU[i + 1], ET[i + 1], charged, w, wo)
      if P[STRIDE * i + P_KIND] == K_TOKEN then out[12 + 4 * i] = s[P[STRIDE * i + P_HASH]] end
    end
    if folded then w[wo], w[wo + 1], wo = F_PENDING, qstring(s), wo + 2 end
    w[wo], w[wo + 1], wo = 1, fmt('%d', t0), wo + 2
    if rid ~= '' then w[wo], w[wo + 1], wo = F_RESENDS, resendrecord(d, rid, now), wo + 2 end
    out[6] = 1
    changed = true
  end
  local sl, skew, need = 0, 0, t0 + TTL * 1000
  if sb > t0 then sl = tonumber(redis.call('HGET', key, F_BLOCKLIM)) or 0 end
  if t0 > now then skew = t0 - now end
  if #s.qa > 0 and s.qa[#s.qa] + TTL * 1000 > need then need = s.qa[#s.qa] + TTL * 1000 end
  settle(key, out, 6, w, wo, changed, sb, sl, t0, not allowed and cost > 0, skew, need, sx, now)
  return out
end

-- The general path: any number of keys, request IDs, grants of part of a
-- cost, reservations (store/memory's run).
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
      local b = redis.pcall('HMGET', KEYS[k], F_BLOCK, 1)
      local sb, s1 = 0, 0
      if not b.err then sb, s1 = tonumber(b[1]) or 0, tonumber(b[2]) or 0 end
      if sb <= now or sb <= s1 then
        redis.call('HINCRBY', KEYS[nk + k], 'n', 1)
        REC[k] = r[3]
      end
    end
  end
  if not REC[k] then
    local s, v, flag = read(KEYS[k], {1, F_BLOCK, F_BLOCKLIM, F_PENDING, F_EXPIRY, F_RESENDS, F_GEN}, now)
    if not s then return v end
    if flag > 0 then flags = flag end
    s[1], s.block, s.blocklim, s.expiry, s.resends, s.gen = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[5]) or 0, v[6], tonumber(v[7]) or 0
    pending(s, v[4])
    S[k] = s
    nd = nd + 1
    D[nd] = k
  end
end

-- A resend of a call that charged (go-redis sent the script again after
-- losing its reply): charge nothing again. A plain take was admitted; a
-- grant or a reservation is reported as not granted, since its answer is
-- not kept. A resend found on no key either was not charged the first time
-- (then it is decided now) or was pushed out of every key's list of IDs:
-- when a key pushed an ID out within the horizon, which one cannot be
-- told, and the call fails rather than charge twice.
if resent then
  for x = 1, nd do
    if resendfound(S[D[x]].resends, rid) then
      local plain = not upto and maxd == 0
      local out = {0, now, 0, 0, flags}
      if plain then out[1], out[3] = 1, cost end
      for k = 1, nk do
        local o = 6 + (k - 1) * (3 + 4 * NL)
        local s = S[k]
        out[o], out[o + 1], out[o + 2] = 3, 0, 0
        for i = 0, NL - 1 do
          local j, p = STRIDE * i, o + 3 + 4 * i
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
    if resendlost(S[D[x]].resends, now, horizon) then return redis.error_reply(RESEND_LOST) end
  end
end

-- Decide.
local EU, ET, EA, ER, T0, T = {}, {}, {}, {}, {}, {}
local blocked = false
for x = 1, nd do
  local k = D[x]
  local s = S[k]
  local t0 = now
  if s[1] > t0 then t0 = s[1] end
  T0[k], T[k] = t0, t0
  if s.block > t0 then blocked = true end
end
local granted = cost
if upto then
  for x = 1, nd do
    local k = D[x]
    for i = 0, NL - 1 do
      local q = (k - 1) * NL + i + 1
      EU[q], ET[q], EA[q], ER[q] = evaluate(S[k], KEYS[k], STRIDE * i, T0[k], 1)
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
      EU[q], ET[q], EA[q], ER[q] = evaluate(S[k], KEYS[k], STRIDE * i, T0[k], c1)
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
        EU[q], ET[q], EA[q], ER[q] = evaluate(S[k], KEYS[k], STRIDE * i, T[k], c1)
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
    out[o], out[o + 1], out[o + 2] = 0, t, s.gen
    for i = 0, NL - 1 do
      local q, p = (k - 1) * NL + i + 1, o + 3 + 4 * i
      local rem, reset = report(s, key, STRIDE * i, t, EU[q], ET[q], EA[q], charged)
      out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, ER[q], 0
    end
    local w, wo, changed = {}, 1, false
    if charged > 0 then
      -- Reservations released by t0 join the fields first; a place in
      -- line stays pending.
      local folded
      wo, folded = fold(s, key, t0, w, wo)
      if t > t0 then
        reserve(s, t, charged)
        for i = 0, NL - 1 do
          if P[STRIDE * i + P_KIND] == K_TOKEN then out[o + 6 + 4 * i] = t + charged * P[STRIDE * i + P_WIDTH] end
        end
      else
        for i = 0, NL - 1 do
          local q = (k - 1) * NL + i + 1
          wo = charge(s, key, STRIDE * i, t, EU[q], ET[q], charged, w, wo)
          if P[STRIDE * i + P_KIND] == K_TOKEN then out[o + 6 + 4 * i] = s[P[STRIDE * i + P_HASH]] end
        end
      end
      if folded or t > t0 then w[wo], w[wo + 1], wo = F_PENDING, qstring(s), wo + 2 end
      w[wo], w[wo + 1], wo = 1, fmt('%d', t0), wo + 2
      if rid ~= '' then w[wo], w[wo + 1], wo = F_RESENDS, resendrecord(s.resends, rid, now), wo + 2 end
      out[o] = 1
      changed = true
    end
    -- Penalties, a clock that stepped back, the write and the expiry: the
    -- key must outlive what it records by ttl.
    local skew, need = 0, t0 + ttl
    if release == 0 and t0 > now then skew = t0 - now end
    if t > t0 then need = t + ttl end
    if #s.qa > 0 and s.qa[#s.qa] + ttl > need then need = s.qa[#s.qa] + ttl end
    settle(key, out, o, w, wo, changed, s.block, s.blocklim, t0, not allowed and cost > 0, skew, need, s.expiry, now)
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
