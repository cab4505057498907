-- lean.lua: the lean path of the common call (see script.lua).

-- The lean path of the common call ('f', a baked policy): it answers a
-- call that every limit admits, on a key with no running penalty, no place
-- in line, no resend and a clock that did not step back, when each limit's
-- state is at hand (a sliding window charged in this sub-bucket or the
-- previous one, or never; a log charged one unit, its chunks read whole).
-- It reads what the general path reads and writes what it writes, in one
-- HMGET and one HSET, before any function of the general path is defined
-- (defining them costs a call more than this path does). Any other call
-- returns nil here, having written nothing, and goes on below.

-- BUCKET_READS: the fields read per sliding window limit, its sum, then
-- the cost and latest admission of the current, edge and next sub-bucket.
local BUCKET_READS = 7
if OP == 'f' and BAKED then repeat -- a break falls through to the general path
  local key, cost, rid = KEYS[1], tonumber(ARGV[3]), ARGV[4]
  if cost < 1 or sub(rid, 1, 1) == '!' then break end
  local now = tonumber(ARGV[2])
  if now == 0 then
    local tm = redis.call('TIME')
    now = tm[1] * 1000000 + tm[2]
  end
  local ttl, nl, ok = BAKED[Q_TTL], BAKED[Q_LIMITS], true
  local f, m = {F_TIME, F_BLOCK, F_EXPIRY, F_RESENDS, F_GEN}, 5
  local lines = BAKED[Q_RESERVES] == 1 -- places in line can be: they are read
  if lines then f[6], m = F_PENDING, 6 end
  local first = m + 1 -- the first limit's first field
  for i = 0, nl - 1 do
    local j = QHEAD + STRIDE * i
    local kind, off, w = BAKED[j + P_KIND], BAKED[j + P_HASH], BAKED[j + P_WIDTH]
    f[m + 1], m = nm(off), m + 1
    if kind == K_BUCKETS then
      -- The current sub-bucket, the edge one and the one after it.
      local n1 = BAKED[j + P_N] + 1
      local a, b, c = off + 1 + floor(now / w) % n1, off + 1 + (floor(now / w) + 1) % n1, off + 1 + (floor(now / w) + 2) % n1
      f[m + 1], f[m + 2], f[m + 3], f[m + 4], f[m + 5], f[m + 6], m = nm(a), nm(a + n1), nm(b), nm(b + n1), nm(c), nm(c + n1), m + 6
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
    local j = QHEAD + STRIDE * i
    local kind, cap, w, per, off = BAKED[j + P_KIND], BAKED[j + P_CAP], BAKED[j + P_WIDTH], BAKED[j + P_PERIOD], BAKED[j + P_HASH]
    local k, rem, reset, mark = floor(now / w), 0, per, 0
    local refill = (k + 1) * w - now -- until more of the quota is back (counters.lua's refill)
    if kind == K_BUCKETS then
      -- The ring's sum less the sub-buckets that left it (h+1..k hold
      -- older ones' costs), which are cleared as the general path clears
      -- them; all of them when the whole window lapsed.
      local n, n1 = BAKED[j + P_N], BAKED[j + P_N] + 1
      local tot, cur, used = 0, 0, 0
      local h = floor(s1 / w)
      if s1 ~= 0 and k - h <= 1 then
        tot, cur = tonumber(v[x]) or 0, tonumber(v[x + 1]) or 0
        if k > h then tot, cur = tot - cur, 0 end
      elseif s1 ~= 0 and k - h < n1 then
        tot = (tonumber(v[x]) or 0) - (tonumber(v[x + 1]) or 0)
        local g = {}
        for q = h + 1, k - 1 do g[q - h] = nm(off + 1 + q % n1) end
        local gv = redis.call('HMGET', key, unpack(g))
        for q = h + 1, k - 1 do
          local c = tonumber(gv[q - h]) or 0
          if c ~= 0 then
            tot = tot - c
            wr[o], wr[o + 1], wr[o + 2], wr[o + 3], o = g[q - h], '0', nm(off + 1 + q % n1 + n1), '0', o + 4
          end
        end
      elseif s1 ~= 0 then
        for q = k - n, k - 1 do
          local c = off + 1 + q % n1
          if q > k - n or (tonumber(v[x + 3]) or 0) ~= 0 then wr[o], wr[o + 1], wr[o + 2], wr[o + 3], o = nm(c), '0', nm(c + n1), '0', o + 4 end
        end
      end
      refill = per
      if s1 == 0 or k - h < n1 then
        used = tot
        local edge, elat = tonumber(v[x + 3]) or 0, tonumber(v[x + 4]) or 0
        if edge ~= 0 and elat <= now - k * w then used = used - edge end
        -- The oldest sub-bucket still counting leaves first: the edge one,
        -- or the one after it; a gap after them, and the general path
        -- finds it.
        if s1 ~= 0 then
          if edge ~= 0 and elat > now - k * w then
            refill = k * w + elat - now
          elseif h >= k - n + 1 then
            if (tonumber(v[x + 5]) or 0) == 0 then
              ok = false
              break
            end
            refill = (k + 1) * w + (tonumber(v[x + 6]) or 0) - now
          end
        end
      end
      if used + cost > cap then
        ok = false
        break
      end
      rem = cap - used - cost
      local a = off + 1 + k % n1
      wr[o], wr[o + 1], wr[o + 2], wr[o + 3], wr[o + 4], wr[o + 5], o = nm(a), fmt('%d', cur + cost), nm(a + n1), fmt('%d', now - k * w), nm(off), fmt('%d', tot + cost), o + 6
      x = x + BUCKET_READS
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
      rem, refill = lo - 1, per
      if lo < cap then
        -- The oldest unit still counting leaves first.
        local pos = (ptr + lo) % cap
        local c, at = v[x + 1 + floor(pos / cs)], pos % cs * 16
        local slot = 0
        if c and #c >= at + 16 then slot = tonumber(sub(c, at + 1, at + 16)) end
        refill = slot + per - now
      end
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
      reset, mark, refill = tat - now, tat, (rem + 1) * w - left
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
      if kind == K_APPROX and prev > 0 and cap - (used + cost) - (rem + 1) >= 0 then
        local r = k * w + floor(w - (cap - (used + cost) - (rem + 1)) * w / prev) - now - 1
        if r < 0 then r = 0 end
        if r < refill then refill = r end
      end
      wr[o], wr[o + 1], wr[o + 2], wr[o + 3], o = nm(off), fmt('%d', k), nm(off + 1), fmt('%d', used + cost), o + 4
      if kind == K_APPROX then wr[o], wr[o + 1], o, x = nm(off + 2), fmt('%d', prev), o + 2, x + 1 end
      x = x + 2
    end
    local p = RHEAD + 1 + KHEAD + RLIM * i
    out[p], out[p + 1], out[p + 2], out[p + 3], out[p + 4] = rem, reset, 0, mark, refill
  end
  if not ok then break end
  wr[o], wr[o + 1], o = F_TIME, fmt('%d', now), o + 2
  if rid ~= '' then
    -- The resend ID joins the key's list (as resendrecord does, below).
    local pt, ids = ZERO16, rid
    if d then pt, ids = sub(d, 1, 16), sub(d, 17) .. rid end
    if #ids > RIDLEN * RIDN then ids, pt = sub(ids, RIDLEN + 1), fmt('%016d', now) end
    wr[o], wr[o + 1], o = F_RESENDS, pt .. ids, o + 2
  end
  local need = now + ttl * 1000
  if sx < need then wr[o], wr[o + 1] = F_EXPIRY, fmt('%d', need + ttl * XSLACK) end
  redis.call('HSET', key, unpack(wr))
  if sx < need then redis.call('PEXPIRE', key, ceil((need + ttl * XSLACK - now) / 1000) + 1) end
  do return out end
until true end

