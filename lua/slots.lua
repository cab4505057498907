-- slots.lua: the release and renew operations of Concurrent limits (see
-- script.lua).

-- opslots is the release or renewal ('c').
local function opslots()
  -- Release ('0') or renew ('1') the slots one charge holds, key by key
  -- (store/memory's slots): each Concurrent limit frees the slot the
  -- charge's mark names, if it still counts; renewing records it again
  -- now. Reply: per key, per limit, the mark from now on (0 for the
  -- other limits).
  local now, renew = clock(ARGV[2]), ARGV[3] == '1'
  local base = 4
  if BAKED then policy(BAKED, 1) else base = policy(ARGV, 4) end
  local reply = {}
  for k = 1, #KEYS do
    local key = KEYS[k]
    local m = base + (k - 1) * (2 + NL)
    local w, wo, f = {}, 1, {}
    for i = 0, NL - 1 do
      local j = STRIDE * i
      reply[(k - 1) * NL + i + 1] = 0
      if P[j + P_KIND] == K_CONC then
        local off = P[j + P_HASH]
        local v = redis.pcall('HMGET', key, nm(off), nm(off + 1), nm(off + 2))
        if v.err then v = {} end
        local e, c0, p0 = srolled(tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, now, P[j + P_WIDTH])
        local mk = tonumber(ARGV[m + 2 + i])
        if mk - 1 == e then
          if c0 > 0 then c0 = c0 - 1 end
        elseif mk - 1 == e - 1 then
          if p0 > 0 then p0 = p0 - 1 end
        end
        if renew then
          c0 = c0 + 1
          reply[(k - 1) * NL + i + 1] = e + 1
        end
        w[wo], w[wo + 1], w[wo + 2], w[wo + 3], w[wo + 4], w[wo + 5], wo = nm(off), fmt('%d', e), nm(off + 1), fmt('%d', c0), nm(off + 2), fmt('%d', p0), wo + 6
      end
    end
    if wo > 1 and (renew or redis.call('EXISTS', key) == 1) then
      redis.call('HSET', key, unpack(w))
      if renew then
        -- The key outlives the slot by the policy's TTL (take's settle).
        local need = now + TTL * 1000
        local sx = tonumber(redis.call('HGET', key, F_EXPIRY)) or 0
        if sx < need then
          redis.call('HSET', key, F_EXPIRY, fmt('%d', need + TTL * XSLACK))
          redis.call('PEXPIRE', key, ceil((need + TTL * XSLACK - now) / 1000) + 1)
        end
      end
    end
  end
  return reply
end
