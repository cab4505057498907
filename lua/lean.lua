-- lean.lua: the lean path of the common call (see script.lua).

-- The lean path of the common call ('f', a baked policy): the frame that
-- reads, decides and writes each key, each limit's own steps being its
-- algorithm's (ALG[kind].leanfields names the fields it reads, and from
-- when until when those names hold where they change with the time; .bind
-- makes the step that decides and charges, in sliding.lua, log.lua,
-- token.lua, fixed.lua and approx.lua). It answers a call that every limit of every key admits, on keys with no running
-- penalty, no place in line, no resend and a clock that did not step
-- back, when each limit's state is at hand (a log charged one unit, its
-- chunks read whole). It decides and writes as the general path does, in
-- one HMGET and one HSET a key (and, when a sliding window's key skipped
-- sub-buckets since its last charge, one more HMGET of those, to clear
-- them), writing nothing until every key has admitted the call. Any
-- other call goes on by the general path (take.lua's main), nothing
-- written.
--
-- Redis's time here goes mostly by the field: each field read or written,
-- each name made with nm, each value turned into a number or digits costs
-- about as much as a hundred lines of Lua, and a small hash (a list) is
-- searched in order, a missing field to its end. So the path reads only
-- the fields it needs, writes a new key's identity fields first, turns
-- digits into numbers by arithmetic (half the cost of tonumber) and only
-- when they are not '0', and sizes its tables up front.

-- A batch ('m', or 'u' for calls alike; see script.lua) runs the path
-- once per call, in order, at one reading of Redis's clock; a call it
-- cannot answer gets 0 (nothing written) and goes again alone
-- (store/redis/multi.go). kb and ab count the keys and arguments of the
-- calls before this one.
local MULTI -- a batch ('m' or 'u'; main sets it)

-- LEANS holds the baked policy's lean steps, one a limit, made by its
-- algorithm's bind once, at the library's first lean call (a limit whose
-- algorithm has none, a Concurrent one, gets false: its leanfields
-- decline first); RESETS whether a batch's answer gives the limit's reset
-- (RUNRESET).
local LEANS, RESETS

-- NAMED keeps the last names a call was given (its fields f, 1 to m, and
-- ib, iq and first, as lean names them), for the cost it was given them
-- for, from the time from until the time till, when a limit's names
-- change (a sliding window's at its sub-bucket's end; the others' never):
-- a run of another time within those, the next run as a rule, takes them
-- as they are instead of naming its fields anew.
local NAMED

local function bindlean()
  LEANS, RESETS = {}, {}
  for i = 1, BAKED[Q_LIMITS] do
    local j = QHEAD + STRIDE * (i - 1)
    local alg = ALG[BAKED[j + P_KIND]]
    LEANS[i], RESETS[i] = alg.bind and alg.bind(j) or false, RUNRESET[BAKED[j + P_KIND]] or false
  end
end

-- leannames names the first count fields of the limit at j (BAKED's
-- positions) into f after m, and returns the new m: the leanfields of an
-- algorithm whose lean path reads its fields whole (fixed.lua, token.lua,
-- approx.lua).
local function leannames(f, m, j, count)
  local off = BAKED[j + P_HASH]
  for c = 0, count - 1 do f[m + 1 + c] = NAMES[off + c] end
  return m + count
end

-- lean answers the call by the lean path, or returns nil (nothing
-- written) for the general path to answer it.
local function lean()
  if (OP == 'f' or MULTI) and BAKED then
    local calls, R, rn, kb, ab, clock, top, WR = 1, nil, 0, 0, 1, 0, 0, nil
    local ank, anow, acost -- a run of calls alike ('u'): their number of keys, now and cost
    if MULTI then calls, R, rn = (#ARGV - 1) / MARGS, {0}, 1 end -- R[1]: the run's clock
    if OP == 'u' then calls, ank, anow, acost = #ARGV - 4, ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0 end
    if not LEANS then bindlean() end
    local ttl, nl = BAKED[Q_TTL], BAKED[Q_LIMITS]
    -- The fields a call reads (f, 1 to m; ib, iq and first below), named
    -- for the time and cost fnow and fcost, and that time in digits (ts): a
    -- batch's calls of one time and cost read the same fields, and a run
    -- takes the last run's while they hold (NAMED).
    local f, m, ib, iq, first, fnow, fcost, ts
    for call = 1, calls do
      local answered, q = false, rn + 1 -- q: the last place of R this call wrote
      local nk, nowarg, cost, rid
      if ank then
        nk, nowarg, cost, rid = ank, anow, acost, ARGV[4 + call]
      elseif MULTI then
        nk, nowarg, cost, rid = ARGV[ab + 1] + 0, ARGV[ab + 2], ARGV[ab + 3] + 0, ARGV[ab + 4]
      else
        nk, nowarg, cost, rid = #KEYS, ARGV[2], ARGV[3] + 0, ARGV[4]
      end
      repeat -- a break falls through to the general path (or, in a batch, answers 0)
        if cost < 1 or #rid > RIDLEN then break end -- a resend: '!', the ID and its horizon
        local now = nowarg + 0
        if now == 0 then
          if clock == 0 then
            local tm = redis.call('TIME')
            clock = tm[1] * 1000000 + tm[2]
          end
          now = clock
        end
        local ok = true
        -- The identity's fields: the last charge, the expiry, the resend IDs and
        -- the refund count; the penalty only under a policy that has one (only
        -- such a policy writes it, and a policy's keys are named after its
        -- penalty), the places in line only under one that reserves.
        if (fnow ~= now or fcost ~= cost) and NAMED and NAMED[6] == cost and now >= NAMED[7] and now < NAMED[8] then
          f, m, ib, iq, first = NAMED[1], NAMED[2], NAMED[3], NAMED[4], NAMED[5]
          fnow, fcost, ts = now, cost, fmt('%d', now)
        end
        if fnow ~= now or fcost ~= cost then
          fnow = nil -- until the fields are named whole
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
          local from, till = -math.huge, math.huge
          for j = QHEAD, QHEAD + STRIDE * (nl - 1), STRIDE do
            local names, lo, hi = ALG[BAKED[j + P_KIND]].leanfields, nil, nil
            if names then m, lo, hi = names(f, m, j, now, cost) end
            if not names or not m then
              ok = false -- a Concurrent limit's slots, or a log's call it does not take
              break
            end
            if lo and lo > from then from = lo end
            if hi and hi < till then till = hi end
          end
          if not ok then break end
          fnow, fcost, ts = now, cost, fmt('%d', now)
          NAMED = {f, m, ib, iq, first, cost, from, till}
        end
        -- The reply, sized up front for five limits of one key (a table that
        -- grows is copied each time it doubles; the nils end it where its
        -- limits do). The writes of the keys before the last wait in W (per key
        -- its fields and values, how many, and its new expiry in ms or false)
        -- until every key has admitted the call; the last key's in wr, o - 1
        -- and px.
        -- In a batch each call's answer goes straight into R instead, after q
        -- (see below).
        local out
        if not MULTI then
          out = {1, now, cost, 0, 0, 1, now, 0, 0, 0, 0, 0, 0, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
        end
        local W, wr, o, px = nil, nil, 1, false
        local need = now + ttl * 1000
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
          local at -- the key's part of the reply, from at + 1
          if out then
            at = RHEAD + (ki - 1) * (KHEAD + RLIM * nl)
            out[at + 1], out[at + 2], out[at + 3] = 1, now, g
          else
            R[q + 1], q = g, q + 1
          end
          -- A call of one key writes every place of wr up to o - 1, so a
          -- batch's calls of one key share one (W holds the others).
          wr = nk == 1 and WR or {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
          if nk == 1 then WR = wr end
          o = 1
          local x = first -- the field read next
          if fresh then
            o = 7
            if rid ~= '' then o = 9 end
            if ib then o = o + 2 end
          end
          for i = 1, nl do
            local rem, reset, mark, refill
            x, o, rem, reset, mark, refill = LEANS[i](v, f, x, now, cost, s1, key, wr, o)
            if not x then
              ok = false
              break
            end
            if out then
              local p = at + KHEAD + 1 + RLIM * (i - 1)
              out[p], out[p + 1], out[p + 2], out[p + 3], out[p + 4] = rem, reset, 0, mark, refill
            else
              -- Its reset only where the kind does not settle it, never its
              -- mark (store/redis/run_answer.go restores them).
              if RESETS[i] then
                R[q + 1], R[q + 2], R[q + 3], q = rem, reset, refill, q + 3
              else
                R[q + 1], R[q + 2], q = rem, refill, q + 2
              end
            end
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
        -- In a batch, the call's answer without what every admission by this
        -- path says alike (admitted, granted its cost, nothing to wait for,
        -- each key charged at now, no retry) or the caller knows (now: the
        -- call's own, else the run's clock, R[1]): its length, then per key
        -- its refund count and per limit its remaining, its reset where
        -- RUNRESET names its kind, and its refill (store/redis/multi.go's
        -- answer puts the rest back), written into R from rn + 2 as each
        -- key admitted the call.
        R[rn + 1], rn = q - rn - 1, q
        answered = true
      until true
      if MULTI and not answered then
        -- What the keys that admitted the call wrote after rn is left for the
        -- next call to write over, or cleared below.
        if q > top then top = q end
        R[rn + 1], rn = 0, rn + 1
      end
      kb, ab = kb + nk, ab + MARGS
    end
    if MULTI then
      for i = rn + 1, top do R[i] = nil end
      R[1] = clock
      return R
    end
  end
end
