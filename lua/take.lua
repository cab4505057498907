-- take.lua: the take operation's general path and the common call's
-- (see script.lua).

-- optake is the take ('t', 'f'): KEYS, ARGV, OP and now are the call's,
-- given as arguments so that they are not upvalues (a function has at
-- most 60).
local function optake(KEYS, ARGV, OP, now)
  -- Take: 't' any call, 'f' the common call (no request ID, a plain take),
  -- which carries fewer arguments; on one key it takes a leaner path here,
  -- on several the general path below.
  local cost, upto, maxd, hasid, rid, resent, horizon
  local force, hold = false, 0
  if OP == 'f' then
    cost, upto, maxd, hasid = tonumber(ARGV[3]), false, 0, false
    rid, resent, horizon = resend(ARGV[4])
    if BAKED then policy(BAKED, 1) else policy(ARGV, 5) end
  else
    cost, upto, maxd, hasid = tonumber(ARGV[3]), ARGV[4] == M_UPTO, tonumber(ARGV[5]), ARGV[7] == '1'
    force = ARGV[4] == M_FORCE
    if ARGV[4] == M_LEASE then
      -- A lease: a grant checked now, recorded hold (ARGV[5]) ahead.
      upto, hold, maxd = true, maxd, 0
    end
    rid, resent, horizon = resend(ARGV[6])
    if BAKED then policy(BAKED, 1) else policy(ARGV, 8) end
  end
  local c1 = cost
  if c1 == 0 then c1 = 1 end

  -- mark is a limit's mark in a receipt after a charge: a token bucket's
  -- TAT, a Concurrent limit's epoch plus one, else 0.
  local function mark(s, j)
    local kind, off = P[j + P_KIND], P[j + P_HASH]
    if kind == K_TOKEN then return s[off] end
    if kind == K_CONC then return s[off] + 1 end
    return 0
  end

  -- retake runs retime before a charge at t0 (not a place in line): a token
  -- bucket of another interval, rewritten in its limit's, is reported and
  -- charged as it now stands, so its limits are evaluated again for c1 (into
  -- EU, ET, EA and ER from q0 + 1), and the refund count is written one
  -- higher (store/memory's run and retime). It returns the next free index
  -- of w and whether reservations were folded in.
  local function retake(s, key, t0, w, wo, EU, ET, EA, ER, q0)
    local retimed, refolded
    wo, retimed, refolded = retime(s, key, t0, w, wo)
    if retimed then
      s.gen = s.gen + 1
      w[wo], w[wo + 1], wo = F_GEN, s.gen, wo + 2
      for i = 0, NL - 1 do
        if P[STRIDE * i + P_KIND] == K_TOKEN then
          local q = q0 + i + 1
          EU[q], ET[q], EA[q] = evaluate(s, key, STRIDE * i, t0, c1)
          ER[q] = 0
        end
      end
    end
    return wo, refolded
  end

  if OP == 'f' and #KEYS == 1 then
    -- The common call on one key, leaner: no request ID, a plain take. It
    -- reads the penalty's limit only while a penalty runs, the pending
    -- reservations only under a policy that reserves, and replies as the
    -- general path below does.
    local key = KEYS[1]
    local fs = {1, F_BLOCK, F_EXPIRY, F_RESENDS, F_GEN}
    if PEND then fs[6] = F_PENDING end
    local s, v, flags = read(key, fs, now)
    if not s then return v end
    s[I_TIME] = tonumber(v[1]) or 0
    local sb, sx, d, sg = tonumber(v[2]) or 0, tonumber(v[3]) or 0, v[4], tonumber(v[5]) or 0
    if PEND then pending(s, v[6]) else pending(s, nil) end
    local t0 = now
    if s[I_TIME] > t0 then t0 = s[I_TIME] end
    if drained(s, t0) then forget(s) end
    local out = {0, now, 0, 0, flags, 0, t0, sg}
    -- A resend of a call that charged: admitted, and charged nothing again
    -- (see the general path).
    if resent and resendfound(d, rid) then
      out[1], out[3], out[6], out[8] = 1, cost, 3, 0
      for i = 0, NL - 1 do
        local u, tot, av = evaluate(s, key, STRIDE * i, t0, c1)
        local rem, reset = report(s, key, STRIDE * i, t0, u, tot, av, 0, t0)
        local p = RHEAD + 1 + KHEAD + RLIM * i
        out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, 0, 0
        out[p + 4] = refill(s, key, STRIDE * i, t0, u, tot, av, 0, rem)
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
    local w, wo, changed, refolded = {}, 1, false, false
    if charged > 0 then
      s.gen = sg
      wo, refolded = retake(s, key, t0, w, wo, EU, ET, EA, ER, 0)
      out[8] = s.gen
    end
    for i = 0, NL - 1 do
      local rem, reset = report(s, key, STRIDE * i, t0, EU[i + 1], ET[i + 1], EA[i + 1], charged, t0)
      local p = RHEAD + 1 + KHEAD + RLIM * i
      out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, ER[i + 1], 0
      out[p + 4] = refill(s, key, STRIDE * i, t0, EU[i + 1], ET[i + 1], EA[i + 1], charged, rem)
    end
    if charged > 0 then
      local folded
      wo, folded = fold(s, key, t0, w, wo)
      folded = folded or refolded
      for i = 0, NL - 1 do
        wo = charge(s, key, STRIDE * i, t0, EU[i + 1], ET[i + 1], charged, w, wo)
        out[RHEAD + 1 + KHEAD + 3 + RLIM * i] = mark(s, STRIDE * i)
      end
      if folded or s.qdirty then w[wo], w[wo + 1], wo = F_PENDING, qstring(s), wo + 2 end
      w[wo], w[wo + 1], wo = 1, fmt('%d', t0), wo + 2
      if rid ~= '' then w[wo], w[wo + 1], wo = F_RESENDS, resendrecord(d, rid, now), wo + 2 end
      out[6] = 1
      changed = true
    end
    local sl, skew, need = 0, 0, t0 + TTL * 1000
    if sb > t0 then sl = tonumber(redis.call('HGET', key, F_BLOCKLIM)) or 0 end
    if t0 > now then skew = t0 - now end
    if #s.qa > 0 and s.qa[#s.qa] + TTL * 1000 > need then need = s.qa[#s.qa] + TTL * 1000 end
    need = debt(s, need)
    settle(key, out, RHEAD + 1, w, wo, changed, sb, sl, t0, not allowed and cost > 0, skew, need, sx, now)
    -- A denial is kept for the calls that repeat it (denial.lua).
    if not allowed then denialkeep(key, s, out, now, ARGV[3], v[1], v[5], sb) end
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
      s[I_TIME], s.block, s.blocklim, s.expiry, s.resends, s.gen = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[5]) or 0, v[6], tonumber(v[7]) or 0
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
          local o = RHEAD + 1 + (k - 1) * (KHEAD + RLIM * NL)
          local s = S[k]
          out[o], out[o + 1], out[o + 2] = 3, 0, 0
          for i = 0, NL - 1 do
            local j, p = STRIDE * i, o + KHEAD + RLIM * i
            out[p], out[p + 1], out[p + 2], out[p + 3], out[p + 4] = 0, 0, 0, 0, 0
            if s then
              local t = now
              if s[I_TIME] > t then t = s[I_TIME] end
              out[o + 1] = t
              local u, tot, av, r = evaluate(s, KEYS[k], j, t, c1)
              local rem, reset = report(s, KEYS[k], j, t, u, tot, av, 0, t)
              if plain then r = 0 end
              out[p], out[p + 1], out[p + 2], out[p + 4] = rem, reset, r, refill(s, KEYS[k], j, t, u, tot, av, 0, rem)
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
    if s[I_TIME] > t0 then t0 = s[I_TIME] end
    if drained(s, t0) then forget(s) end
    T0[k], T[k] = t0, t0
    if hold > 0 then s.stamp = t0 + hold end -- a lease: checked at t0, recorded ahead
    if s.block > t0 then blocked = true end
  end
  -- evalall evaluates every limit of every key decided at its time in at,
  -- for cost c (results in EU, ET, EA, ER by key and limit).
  local function evalall(at, c)
    for x = 1, nd do
      local k = D[x]
      for i = 0, NL - 1 do
        local q = (k - 1) * NL + i + 1
        EU[q], ET[q], EA[q], ER[q] = evaluate(S[k], KEYS[k], STRIDE * i, at[k], c)
      end
    end
  end
  local granted = cost
  if upto then
    -- The grant is what every limit of every key has room for now.
    evalall(T0, 1)
    for q, a in pairs(EA) do
      -- A slot there is taken whatever the grant.
      if a < granted and not (a > 0 and P[STRIDE * ((q - 1) % NL) + P_KIND] == K_CONC) then granted = a end
    end
    if blocked then granted = 0 end
    if granted > 0 then
      c1 = granted
      for q in pairs(ER) do ER[q] = 0 end
    end
  else
    evalall(T0, c1)
  end
  local allowed = not blocked and (not upto or granted > 0)
  for x = 1, nd do
    for i = 0, NL - 1 do
      if ER[(D[x] - 1) * NL + i + 1] ~= 0 then allowed = false end
    end
  end
  if force then allowed, blocked = true, false end
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
      end
      evalall(T, c1)
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
  -- remaining, reset, retry, refill (a record written before refill was
  -- kept has no refill: 0).
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
    local o = RHEAD + 1 + (k - 1) * (KHEAD + RLIM * NL)
    if REC[k] then
      local v = numbers(REC[k])
      local per = 3
      if #v == 2 + 4 * NL then per = 4 end
      out[o], out[o + 1], out[o + 2] = 2, v[2], 0
      for i = 0, NL - 1 do
        local p, q = o + KHEAD + RLIM * i, 3 + per * i
        out[p], out[p + 1], out[p + 2], out[p + 3], out[p + 4] = v[q], v[q + 1], v[q + 2], 0, 0
        if per == 4 then out[p + 4] = v[q + 3] end
      end
    else
      local s, key, t0, t = S[k], KEYS[k], T0[k], T[k]
      -- A lease's charge is recorded at its stamp, else at t.
      local rec = s.stamp or t
      out[o], out[o + 1], out[o + 2] = 0, t, s.gen
      local w, wo, changed, refolded = {}, 1, false, false
      if charged > 0 and t == t0 and not s.stamp then
        wo, refolded = retake(s, key, t0, w, wo, EU, ET, EA, ER, (k - 1) * NL)
        out[o + 2] = s.gen
      end
      for i = 0, NL - 1 do
        local q, p = (k - 1) * NL + i + 1, o + KHEAD + RLIM * i
        if force then
          out[p], out[p + 1], out[p + 2], out[p + 3], out[p + 4] = 0, 0, 0, 0, 0 -- a debt reports nothing
        else
          local rem, reset = report(s, key, STRIDE * i, t, EU[q], ET[q], EA[q], charged, rec)
          out[p], out[p + 1], out[p + 2], out[p + 3] = rem, reset, ER[q], 0
          out[p + 4] = refill(s, key, STRIDE * i, t, EU[q], ET[q], EA[q], charged, rem)
        end
      end
      if charged > 0 then
        -- Places in line released by t0 join the fields first; a place in
        -- line (a reservation's or a lease's) stays pending.
        local folded
        wo, folded = fold(s, key, t0, w, wo)
        folded = folded or refolded
        if rec > t0 then
          if s.stamp then rec = place(s, rec, charged) else reserve(s, rec, charged) end
          out[o + 1] = rec
          for i = 0, NL - 1 do
            local j = STRIDE * i
            -- Rings hold the sub-buckets up to t0, the last charge's time.
            if P[j + P_KIND] == K_BUCKETS then wo = badvance(s, key, j, t0, w, wo) end
            if P[j + P_KIND] == K_LOG and s.unlaid and s.unlaid[j] then
              -- A log first written by a place in line: its ring's size
              -- is recorded now, as a charge records it, so that a policy
              -- of a smaller rate folds the place into a ring that holds
              -- it (store/memory lays a key out at its first write).
              w[wo], w[wo + 1], wo = P[j + P_HASH], s.ring[j] * LOGBASE, wo + 2
            end
            if P[j + P_KIND] == K_TOKEN then
              out[o + KHEAD + 3 + RLIM * i] = rec + charged * P[j + P_WIDTH]
              -- A place in line counts in the interval the bucket was
              -- written in: one never written takes this one's.
              local off = P[j + P_HASH]
              if (s[off + 1] or 0) == 0 then
                s[off + 1] = P[j + P_WIDTH]
                w[wo], w[wo + 1], wo = off + 1, P[j + P_WIDTH], wo + 2
              end
            end
          end
        else
          for i = 0, NL - 1 do
            local q = (k - 1) * NL + i + 1
            if not (force and P[STRIDE * i + P_KIND] == K_CONC) then -- a debt is cost, not a request in flight
              wo = charge(s, key, STRIDE * i, t, EU[q], ET[q], charged, w, wo)
              out[o + KHEAD + 3 + RLIM * i] = mark(s, STRIDE * i)
            end
          end
        end
        if folded or rec > t0 or s.qdirty then w[wo], w[wo + 1], wo = F_PENDING, qstring(s), wo + 2 end
        w[wo], w[wo + 1], wo = 1, fmt('%d', t0), wo + 2
        if force then
          -- A debt starts a new epoch (store/memory's run).
          s.gen = (floor(s.gen / EPOCH) + 1) * EPOCH
          w[wo], w[wo + 1], wo = F_GEN, s.gen, wo + 2
        end
        if rid ~= '' then w[wo], w[wo + 1], wo = F_RESENDS, resendrecord(s.resends, rid, now), wo + 2 end
        out[o] = 1
        changed = true
      end
      -- Penalties, a clock that stepped back, the write and the expiry: the
      -- key must outlive what it records by ttl.
      local skew, need = 0, t0 + ttl
      if release == 0 and t0 > now then skew = t0 - now end
      if rec > t0 then need = rec + ttl end
      if #s.qa > 0 and s.qa[#s.qa] + ttl > need then need = s.qa[#s.qa] + ttl end
      need = debt(s, need)
      local sb = s.block
      if force then sb = 0 end -- a debt neither reports a penalty nor starts one
      settle(key, out, o, w, wo, changed, sb, s.blocklim, t0, not allowed and cost > 0, skew, need, s.expiry, now)
      if hasid and charged > 0 and not (RECE[k] and RECE[k] > now) then
        local v = {charged, t}
        for i = 0, NL - 1 do
          local p, q = o + KHEAD + RLIM * i, 3 + 4 * i
          v[q], v[q + 1], v[q + 2], v[q + 3] = out[p], out[p + 1], out[p + 2], out[p + 4]
        end
        for i = 1, #v do v[i] = fmt('%d', v[i]) end
        redis.call('HSET', KEYS[nk + k], 'n', 0, 'e', fmt('%d', now + IDTTL), 'v', table.concat(v, ' '))
        redis.call('PEXPIRE', KEYS[nk + k], ceil(IDTTL / 1000) + 1)
      end
    end
  end
  return out
end

-- main answers one call (script.lua says what each operation takes and
-- replies): by the lean path where it can, else by the general one.
local function main()
  OP = ARGV[1]
  MULTI = OP == 'm' or OP == 'u'
  local leantried = false
  if OP == 'g' then OP, leantried = 'f', true end -- declined by a batch's lean path
  if not leantried then
    local r = lean()
    if r ~= nil then return r end
  end
  if MULTI then return redis.error_reply('ERR ratelimit: a batch of calls needs its policy baked into the script') end
  if OP == 'x' then return opreset() end
  now = clock(ARGV[2])
  if OP == 'f' and BAKED and #KEYS == 1 then
    -- A repeat of a denial the key keeps is answered from it (denial.lua).
    policy(BAKED, 1)
    local r = denialanswer(KEYS[1], ARGV[3], ARGV[4], now)
    if r then return r end
  end
  if OP == 'r' then return oprefund() end
  if OP == 'c' then return opslots() end
  return optake(KEYS, ARGV, OP, now)
end
