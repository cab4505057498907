-- lean.lua: the lean path of the common call (see script.lua).

-- The lean path of the common call ('f', a baked policy): it answers a
-- call that every limit of every key admits, on keys with no running
-- penalty, no place in line, no resend and a clock that did not step
-- back, when each limit's state is at hand (a log charged one unit, its
-- chunks read whole). It decides and writes as the general path does, in
-- one HMGET and one HSET a key (and, when a sliding window's key skipped
-- sub-buckets since its last charge, one more HMGET of those, to clear
-- them), writing nothing until every key has admitted the call, before
-- any function of the general path is defined (defining them costs a call
-- more than this path does). Any other call goes on below, nothing
-- written.
--
-- Redis's time here goes mostly by the field: each field read or written,
-- each name made with nm, each value turned into a number or digits costs
-- about as much as a hundred lines of Lua, and a small hash (a list) is
-- searched in order, a missing field to its end. So the path reads only
-- the fields it needs, writes a new key's identity fields first, turns
-- digits into numbers by arithmetic (half the cost of tonumber) and only
-- when they are not '0', and sizes its tables up front.

-- BUCKET_READS: the fields read per sliding window limit: its sum, then
-- the current, the edge and the next sub-bucket's field (each a cost and
-- a latest admission, BSEP between them; '0' when cleared).
local BUCKET_READS = 4
-- A batch ('m', see script.lua) runs the path once per call, in order, at
-- one reading of Redis's clock; a call it cannot answer gets 0 (nothing
-- written) and goes again alone (store/redis/multi.go). kb and ab count the keys and
-- arguments of the calls before this one.
local MULTI -- a batch ('m'; main sets it)

-- lean answers the call by the lean path, or returns nil (nothing
-- written) for the general path to answer it.
local function lean()
  if (OP == 'f' or MULTI) and BAKED then
    local calls, R, kb, ab, clock, F = 1, nil, 0, 1, 0, nil
    if MULTI then calls, R = (#ARGV - 1) / MARGS, {} end
    for call = 1, calls do
      local nk, nowarg, cost, rid = #KEYS, ARGV[2], ARGV[3] + 0, ARGV[4]
      if MULTI then nk, nowarg, cost, rid = ARGV[ab + 1] + 0, ARGV[ab + 2], ARGV[ab + 3] + 0, ARGV[ab + 4] end
      repeat -- a break falls through to the general path (or, in a batch, answers 0)
        if cost < 1 or byte(rid, 1) == 33 then break end -- 33: '!', a resend
        local now = nowarg + 0
        if now == 0 then
          if clock == 0 then
            local tm = redis.call('TIME')
            clock = tm[1] * 1000000 + tm[2]
          end
          now = clock
        end
        local ttl, nl, ok = BAKED[Q_TTL], BAKED[Q_LIMITS], true
        -- The identity's fields: the last charge, the expiry, the resend IDs and
        -- the refund count; the penalty only under a policy that has one (only
        -- such a policy writes it, and a policy's keys are named after its
        -- penalty), the places in line only under one that reserves. A batch's
        -- calls of one time and cost read the same fields: named once (F).
        local f, m, ib, iq, first
        if F and F.now == now and F.cost == cost then
          f, m, ib, iq, first = F.f, F.m, F.ib, F.iq, F.first
        else
          f = {F_TIME, F_EXPIRY, F_RESENDS, F_GEN, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
          m, ib, iq = 4, nil, nil
          if BAKED[Q_BLOCK] > 0 then
            m, ib = 5, 5
            f[5] = F_BLOCK
          end
          if BAKED[Q_PENDING] == 1 then
            m = m + 1
            f[m], iq = F_PENDING, m
          end
          first = m + 1 -- the first limit's first field
          for j = QHEAD, QHEAD + STRIDE * (nl - 1), STRIDE do
            local kind, off = BAKED[j + P_KIND], BAKED[j + P_HASH]
            f[m + 1] = NAMES[off]
            if kind == K_BUCKETS then
              -- The current sub-bucket's field, the edge one's and the next one's
              -- (a key that skipped sub-buckets needs theirs too: below). k is
              -- floor(now / w), without a call.
              local w, n1 = BAKED[j + P_WIDTH], BAKED[j + P_N] + 1
              local k = (now - now % w) / w
              f[m + 2], f[m + 3], f[m + 4], m = NAMES[off + 1 + k % n1], NAMES[off + 1 + (k + 1) % n1], NAMES[off + 1 + (k + 2) % n1], m + 4
            elseif kind == K_LOG then
              local chunks = ceil(BAKED[j + P_CAP] / BAKED[j + P_CHUNK])
              if cost ~= 1 or chunks > 8 then
                ok = false
                break
              end
              for c = 1, chunks do f[m + 1 + c] = NAMES[off + c] end
              m = m + 1 + chunks
            elseif kind == K_TOKEN then
              f[m + 2], m = NAMES[off + 1], m + 2 -- the TAT, and the interval it was written in
            elseif kind == K_CONC then
              ok = false -- slots go by the general path
              break
            else
              f[m + 2], m = NAMES[off + 1], m + 2
              if kind == K_APPROX then f[m + 1], m = NAMES[off + 2], m + 1 end
            end
          end
          if not ok then break end
          if MULTI then F = {now = now, cost = cost, f = f, m = m, ib = ib, iq = iq, first = first, ts = fmt('%d', now)} end
        end
        -- The reply, sized up front for five limits of one key (a table that
        -- grows is copied each time it doubles; the nils end it where its
        -- limits do). The writes of the keys before the last wait in W (per key
        -- its fields and values, how many, and its new expiry in ms or false)
        -- until every key has admitted the call; the last key's in wr, o - 1
        -- and px.
        local out = {1, now, cost, 0, 0, 1, now, 0, 0, 0, 0, 0, 0, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
        local W, wr, o, px = nil, nil, 1, false
        local ts, need = F and F.now == now and F.ts or fmt('%d', now), now + ttl * 1000
        for ki = 1, nk do
          local key = KEYS[kb + ki]
          local v = redis.pcall('HMGET', key, unpack(f, 1, m))
          if v.err then ok = false break end
          local s1, sx, d, g = (v[1] or 0) + 0, (v[2] or 0) + 0, v[3], v[4]
          if s1 > now then ok = false break end
          if ib and v[ib] and v[ib] ~= '0' and v[ib] + 0 > now then ok = false break end
          if iq and v[iq] and v[iq] ~= '' then ok = false break end
          if g and g ~= '0' then g = g + 0 else g = 0 end
          -- A new key (no charge, no expiry; at most a Reset's F_GEN) gets the
          -- identity's fields first, where every call finds them soonest: the
          -- write's first slots are kept for them.
          local fresh = not (v[1] or v[2])
          local at = RHEAD + (ki - 1) * (KHEAD + RLIM * nl) -- the key's part of the reply, from at + 1
          out[at + 1], out[at + 2], out[at + 3] = 1, now, g
          wr = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
          o = 1
          local x = first -- the field read next
          if fresh then
            o = 7
            if rid ~= '' then o = 9 end
            if ib then o = o + 2 end
          end
          for i = 0, nl - 1 do
            local j = QHEAD + STRIDE * i
            local kind, cap, w, per = BAKED[j + P_KIND], BAKED[j + P_CAP], BAKED[j + P_WIDTH], BAKED[j + P_PERIOD]
            local k, rem, reset, mark = (now - now % w) / w, 0, per, 0
            local refill = (k + 1) * w - now -- until more of the quota is back (counters.lua's refill)
            if kind == K_BUCKETS then
              -- The ring's sum less the sub-buckets that left it (h+1..k hold
              -- older ones' costs), which are cleared as the general path clears
              -- them; all of them when the whole window lapsed. tot is then what
              -- sub-buckets k-n..h hold, the edge one's included.
              local n, off = BAKED[j + P_N], BAKED[j + P_HASH]
              local n1, h, tot, cur, used, past = n + 1, (s1 - s1 % w) / w, 0, 0, 0, false
              local cs = v[x + 1]
              if cs and cs ~= '0' then cur = sub(cs, 1, find(cs, BSEP, 1, true) - 1) + 0 end
              if s1 ~= 0 and k - h <= 1 then
                tot = (v[x] or 0) + 0
                if k > h then tot, cur = tot - cur, 0 end
              elseif s1 ~= 0 and k - h < n1 then
                tot, cur = (v[x] or 0) - cur, 0
                local gn = {}
                for q = h + 1, k - 1 do gn[q - h] = NAMES[off + 1 + q % n1] end
                local gv = redis.call('HMGET', key, unpack(gn))
                for q = h + 1, k - 1 do
                  local c = gv[q - h]
                  if c and c ~= '0' then
                    tot = tot - sub(c, 1, find(c, BSEP, 1, true) - 1)
                    wr[o], wr[o + 1], o = gn[q - h], '0', o + 2
                  end
                end
              elseif s1 ~= 0 then
                local e = v[x + 2]
                for q = k - n, k - 1 do
                  if q > k - n or e and e ~= '0' then wr[o], wr[o + 1], o = NAMES[off + 1 + q % n1], '0', o + 2 end
                end
                cur = 0
              else
                cur = 0
              end
              refill = per
              if s1 == 0 or k - h < n1 then
                used = tot
                local edge, counts = v[x + 2], false
                if edge and edge ~= '0' then
                  local p = find(edge, BSEP, 1, true)
                  local elat = sub(edge, p + 1) + 0
                  edge = sub(edge, 1, p - 1) + 0
                  if elat <= now - k * w then
                    used = used - edge
                  elseif s1 ~= 0 then
                    -- The edge sub-bucket still counts, and leaves first.
                    refill, counts = k * w + elat - now, true
                  end
                end
                -- Else the oldest sub-bucket still counting is the first after the
                -- edge one, up to the last charge's, that holds cost: the next one,
                -- read with the edge one, when it holds cost (and was charged in
                -- this round of the ring); the current one when it holds all that
                -- counts (a young key), its latest admission being the last
                -- charge's. Past those, with quota left, the claim stops where the
                -- one after the edge and the next could leave at the earliest; with
                -- none left it is exact, which the general path finds (counters.lua's
                -- refill).
                local nc = v[x + 3]
                if s1 ~= 0 and not counts and used > 0 and h >= k - n + 1 and nc and nc ~= '0' then
                  -- The one after the edge holds cost (a busy key): it leaves first.
                  refill = (k + 1) * w + sub(nc, find(nc, BSEP, 1, true) + 1) - now
                elseif s1 ~= 0 and not counts and used > 0 and h == k and used == cur then
                  refill = s1 + per - now
                elseif s1 ~= 0 and not counts and used > 0 then
                  refill = (k + 2) * w - now
                  if refill > per then refill = per end
                  past = true
                end
              end
              if used + cost > cap or past and used + cost == cap then
                ok = false
                break
              end
              rem = cap - used - cost
              wr[o], wr[o + 1], wr[o + 2], wr[o + 3], o = f[x], fmt('%d', tot + cost), f[x + 1], fmt(BFMT, cur + cost, now - k * w), o + 4
              x = x + BUCKET_READS
            elseif kind == K_LOG then
              -- The units that stopped counting by now are the oldest: a search
              -- for how many; none, and a unit does not fit.
              -- The pointer field: the oldest slot, and the ring's size times
              -- LOGBASE; a ring of another size than the capacity (a policy of
              -- the same ID with another rate wrote it) goes to the general
              -- path (log.lua's lrelay).
              local cs, ptr = BAKED[j + P_CHUNK], (v[x] or 0) + 0
              if ptr ~= 0 and ptr - ptr % LOGBASE ~= cap * LOGBASE then
                ok = false
                break
              end
              ptr = ptr % LOGBASE
              local lo, hi = 0, cap
              while lo < hi do
                local mid = floor((lo + hi) / 2)
                local pos = (ptr + mid) % cap
                local c, at = v[x + 1 + floor(pos / cs)], pos % cs * TW
                local slot = 0
                if c and #c >= at + TW then slot = tonumber(sub(c, at + 1, at + TW)) end
                if slot + per <= now then lo = mid + 1 else hi = mid end
              end
              local ci = floor(ptr / cs)
              local str, nsl = v[x + 1 + ci] or '', cs
              if (ci + 1) * cs > cap then nsl = cap - ci * cs end
              if lo == 0 or #str % TW ~= 0 or #str > nsl * TW then
                ok = false
                break
              end
              rem, refill = lo - 1, per
              if lo < cap then
                -- The oldest unit still counting leaves first.
                local pos = (ptr + lo) % cap
                local c, at = v[x + 1 + floor(pos / cs)], pos % cs * TW
                local slot = 0
                if c and #c >= at + TW then slot = tonumber(sub(c, at + 1, at + TW)) end
                refill = slot + per - now
              end
              str = str .. string.rep('0', nsl * TW - #str)
              local at = ptr % cs * TW
              wr[o], wr[o + 1], wr[o + 2], wr[o + 3], o = f[x + 1 + ci], sub(str, 1, at) .. fmt(TFMT, now) .. sub(str, at + TW + 1), f[x], fmt('%d', (ptr + 1) % cap + cap * LOGBASE), o + 4
              x = x + 1 + ceil(cap / cs)
            elseif kind == K_TOKEN then
              -- A TAT written in another interval (by a policy of the same
              -- ID with another rate) goes to the general path (retime).
              local iv = v[x + 1]
              if iv and iv + 0 ~= w then
                ok = false
                break
              end
              local tat = (v[x] or 0) + 0
              if tat < now then tat = now end
              if (tat - now) + cost * w > cap * w then
                ok = false
                break
              end
              tat = tat + cost * w
              local left = cap * w - (tat - now)
              if left > 0 then rem = floor(left / w) end
              reset, mark, refill = tat - now, tat, (rem + 1) * w - left
              wr[o], wr[o + 1], o = f[x], fmt('%d', tat), o + 2
              if not iv then wr[o], wr[o + 1], o = f[x + 1], fmt('%d', w), o + 2 end
              x = x + 2
            else
              local win, used, prev = (v[x] or 0) + 0, 0, 0
              if win == k then
                used = (v[x + 1] or 0) + 0
                if kind == K_APPROX then prev = (v[x + 2] or 0) + 0 end
              elseif win == k - 1 and kind == K_APPROX then
                prev = (v[x + 1] or 0) + 0
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
              wr[o], wr[o + 1], wr[o + 2], wr[o + 3], o = f[x], fmt('%d', k), f[x + 1], fmt('%d', used + cost), o + 4
              if kind == K_APPROX then wr[o], wr[o + 1], o, x = f[x + 2], fmt('%d', prev), o + 2, x + 1 end
              x = x + 2
            end
            local p = at + KHEAD + 1 + RLIM * i
            out[p], out[p + 1], out[p + 2], out[p + 3], out[p + 4] = rem, reset, 0, mark, refill
          end
          if not ok then break end
          if rid ~= '' then
            -- The resend ID joins the key's list (as resendrecord does, below);
            -- when it is full, the oldest ID leaves and the time is noted (rid is
            -- RIDLEN characters).
            if not d then
              d = ZEROT .. rid
            elseif #d + #rid <= TW + RIDLEN * RIDN then
              d = d .. rid
            else
              local pt = ts
              if #pt ~= TW then pt = fmt(TFMT, now) end
              d = pt .. sub(d, TW + 1 + RIDLEN) .. rid
            end
          end
          local xs = sx < need and fmt('%d', need + ttl * XSLACK)
          if fresh then
            wr[1], wr[2], wr[3], wr[4], wr[5], wr[6] = F_TIME, ts, F_GEN, v[4] or '0', F_EXPIRY, xs
            local q = 7
            if rid ~= '' then wr[7], wr[8], q = F_RESENDS, d, 9 end
            if ib then wr[q], wr[q + 1] = F_BLOCK, '0' end
          else
            wr[o], wr[o + 1], o = F_TIME, ts, o + 2
            if rid ~= '' then wr[o], wr[o + 1], o = F_RESENDS, d, o + 2 end
            if xs then wr[o], wr[o + 1], o = F_EXPIRY, xs, o + 2 end
          end
          px = xs and ceil((need + ttl * XSLACK - now) / 1000) + 1
          if ki < nk then
            if not W then W = {} end
            W[3 * ki - 2], W[3 * ki - 1], W[3 * ki] = wr, o - 1, px
          end
        end
        if not ok then break end
        for ki = 1, nk - 1 do
          redis.call('HSET', KEYS[kb + ki], unpack(W[3 * ki - 2], 1, W[3 * ki - 1]))
          if W[3 * ki] then redis.call('PEXPIRE', KEYS[kb + ki], W[3 * ki]) end
        end
        redis.call('HSET', KEYS[kb + nk], unpack(wr, 1, o - 1))
        if px then redis.call('PEXPIRE', KEYS[kb + nk], px) end
        if not MULTI then return out end
        R[call] = out
      until true
      if MULTI and not R[call] then R[call] = 0 end
      kb, ab = kb + nk, ab + MARGS
    end
    if MULTI then return R end
  end
end
