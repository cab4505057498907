-- frame.lua: what a take does around the algorithms for each key:
-- reading its fields up front (read), the expiry its debts need (debt),
-- and finishing its part of the reply and writing it (settle) (see
-- script.lua; take.lua uses these).

-- settle finishes one key's part of a take reply (from index o: KHEAD
-- numbers, then RLIM per limit) and writes its fields. A running penalty
-- (until sb, reported on limit sl) denies and says how long it lasts; else a denial that may start one (start) sets BLOCK on the limit
-- that waits longest. A clock that stepped back by skew lengthens every
-- wait by it. Then the changed fields w[1..wo-1] are written, as strings,
-- and the expiry (recorded in F_EXPIRY, now sx) is pushed a quarter ttl
-- past need when it falls short of it, so a busy key's expiry is refreshed
-- once per quarter ttl.
local function settle(key, out, o, w, wo, changed, sb, sl, t0, start, skew, need, sx, now)
  if sb > t0 then
    local p = o + KHEAD + RLIM * sl
    local left = sb - t0
    if out[p + 2] >= 0 and out[p + 2] < left then out[p + 2] = left end
    if out[p + 1] < left then out[p + 1] = left end
    if out[p + 4] < left then out[p + 4] = left end
    out[p] = 0
  elseif start and BLOCK > 0 then
    local worst
    for i = 0, NL - 1 do
      local r = out[o + KHEAD + 2 + RLIM * i]
      if r > 0 and (not worst or r > out[o + KHEAD + 2 + RLIM * worst]) then worst = i end
    end
    if worst then
      local p = o + KHEAD + RLIM * worst
      if out[p + 2] < BLOCK then out[p + 2] = BLOCK end
      if out[p + 1] < BLOCK then out[p + 1] = BLOCK end
      if out[p + 4] < BLOCK then out[p + 4] = BLOCK end
      out[p] = 0
      w[wo], w[wo + 1], w[wo + 2], w[wo + 3], wo = F_BLOCK, t0 + BLOCK, F_BLOCKLIM, worst, wo + 4
      changed = true
    end
  end
  if skew > 0 then
    for i = 0, NL - 1 do
      local p = o + KHEAD + RLIM * i
      if out[p + 2] > 0 then out[p + 2] = out[p + 2] + skew end
      if out[p + 1] > 0 then out[p + 1] = out[p + 1] + skew end
      if out[p + 4] > 0 then out[p + 4] = out[p + 4] + skew end
    end
  end
  if not changed then return end
  if sx < need then
    w[wo], w[wo + 1], wo = F_EXPIRY, need + TTL * XSLACK, wo + 2
  end
  for i = 1, wo - 1 do
    if type(w[i]) == 'number' then w[i] = fmt('%d', w[i]) end
  end
  redis.call('HSET', key, unpack(w))
  if sx < need then redis.call('PEXPIRE', key, ceil((need + TTL * XSLACK - now) / 1000) + 1) end
end

-- debt returns need, or a token bucket's TAT (places in line included)
-- when that lies later: a TAT written in another interval, or places in
-- line counted in one, may owe past the policy's TTL, and the key
-- outlives what it owes (store/memory's expiry).
local function debt(s, need)
  for j = 0, STRIDE * (NL - 1), STRIDE do
    if P[j + P_KIND] == K_TOKEN then
      local x = tat(s, j)
      if x > need then need = x end
    end
  end
  return need
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
    if ch[i] == true then
      s[f[i]] = v[i] or false
    elseif ch[i] == RINGSUM then
      s[f[i]] = ringsum(v[i])
    elseif ch[i] then
      bdecode(s, f[i], v[i], ch[i])
    else
      s[f[i]] = tonumber(v[i]) or 0
    end
  end
  for j = 0, STRIDE * (NL - 1), STRIDE do
    if P[j + P_KIND] == K_LOG then lrelay(s, key, j) end
  end
  return s, v, flag
end
