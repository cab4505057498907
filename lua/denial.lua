-- denial.lua: a denial kept for the calls that repeat it (see script.lua;
-- take.lua uses these).
--
-- A flood of one identity's common calls is denied over and over by the
-- general path ('g': the caller knows the key is held), each call reading
-- and weighing every limit again. Under a policy of sliding windows alone
-- (sub-buckets or an exact log; no penalty), on a key holding no places
-- in line, a denial's numbers are instants fixed by what the key holds (a
-- sub-bucket's latest admission or end, a logged admission) less the
-- call's time, or constants (0, -1, and the whole period a limit where
-- nothing counts claims): while the key's counters stay as they are,
-- and the time within the sub-bucket of every limit and short of every
-- instant the denial names, the next denial is this one shifted by the
-- time that passed. So the denial is kept in the key: the header field
-- F_DENIAL holds its time (TW digits) and how long it holds (DW), then
-- what it was decided on: the policy, the cost and the key's refund
-- count as they were; the key's time is marked, written again after a
-- space, which every reader takes for the same number (Lua's and
-- miniredis's, where a leading zero may read as octal) and no charge
-- writes, so a marked time says no charge came since. A field
-- per limit, F_DENIAL and its number, holds its remaining, reset, wait
-- and refill (DW each). A call that finds all of it as it is now, within
-- the hold, is answered from it, reading no counter and writing nothing.
-- Every charge writes the key's time afresh, unmarked, even in the same
-- microsecond (a charge in the same one, or on a clock that stepped
-- back); a refund moves the refund count; a reset deletes the key: the
-- next call is then decided afresh. (A policy without a penalty never
-- finds one on its keys: a policy's keys are named after its penalty.)

-- DENIALNAMES[i] is the name of limit i's kept field.
local DENIALNAMES = {}

-- denialkeeps reports whether the policy's denials may be kept: baked,
-- without a penalty, every limit a sliding window (an exact log, or two
-- or more sub-buckets).
local function denialkeeps()
  if not BAKED or BLOCK ~= 0 then return false end
  for j = 0, STRIDE * (NL - 1), STRIDE do
    local kind = P[j + P_KIND]
    if kind ~= K_LOG and (kind ~= K_BUCKETS or P[j + P_N] < 2) then return false end
  end
  for i = #DENIALNAMES + 1, NL do DENIALNAMES[i] = F_DENIAL .. i end
  return true
end

-- denialbasis is what a denial of cost is decided on besides the key's
-- time, as the end of its header field holds it: the policy, the cost and
-- the key's refund count field as read (nil: '').
local function denialbasis(cost, gen)
  return POLICYID .. ' ' .. cost .. ' ' .. (gen or '')
end

-- denialkeep keeps the denial out (the reply of a common call on one key
-- s, decided at now) of cost (as the call gave it), decided on the time
-- and refund count fields s1 and gen as read, on a key holding no places
-- in line (sb: the end of its penalty, from a policy of the same name
-- that had one), on a clock that did not step back behind the key's time
-- (the waits would be lengthened by the step). The time is marked, once:
-- written again after a space. The hold ends at the first end of a
-- sub-bucket or instant the denial names; a number of more than DW digits
-- is not kept.
local function denialkeep(key, s, out, now, cost, s1, gen, sb)
  if out[5] ~= 0 or not s1 or s[I_TIME] > now or sb > now or #s.qa > 0 or not denialkeeps() then return end
  local hold = now + DMAX
  for i = 0, NL - 1 do
    local j, p = STRIDE * i, RHEAD + 1 + KHEAD + RLIM * i
    if out[p] >= DMAX then return end
    if P[j + P_KIND] == K_BUCKETS then
      local width = P[j + P_WIDTH]
      local e = (floor(now / width) + 1) * width
      if e < hold then hold = e end
    end
    for d = p + 1, p + 4 do
      -- reset, wait and refill (a mark, 0 in a denial, bounds nothing)
      if out[d] >= DMAX then return end
      if out[d] > 0 and now + out[d] < hold then hold = now + out[d] end
    end
  end
  if hold - now >= DMAX then return end
  local w = {F_DENIAL, nil, F_TIME, s1}
  if byte(s1, 1) ~= 32 then w[4] = ' ' .. s1 end -- 32: ' '
  w[2] = fmt(TFMT, now) .. fmt(DFMT, hold - now) .. denialbasis(cost, gen)
  for i = 0, NL - 1 do
    local p = RHEAD + 1 + KHEAD + RLIM * i
    w[5 + 2 * i] = DENIALNAMES[i + 1]
    w[6 + 2 * i] = fmt(DFMT, out[p]) .. fmt(DFMT, out[p + 1]) .. fmt(DFMT, out[p + 2]) .. fmt(DFMT, out[p + 4])
  end
  redis.call('HSET', key, unpack(w))
end

-- denialanswer answers a common call on one key (cost, its resend ID rid)
-- at now from the denial the key keeps, or returns nil: none kept, or not
-- for this call, or no longer true.
local function denialanswer(key, cost, rid, now)
  if sub(rid, 1, 1) == '!' or not denialkeeps() then return nil end
  local f = {F_TIME, F_GEN, F_DENIAL}
  for i = 1, NL do f[3 + i] = DENIALNAMES[i] end
  local v = redis.pcall('HMGET', key, unpack(f))
  local head = v[3]
  if v.err or not head or not v[1] or byte(v[1], 1) ~= 32 or sub(head, TW + DW + 1) ~= denialbasis(cost, v[2]) then return nil end
  local at = tonumber(sub(head, 1, TW))
  if now < at or now >= at + tonumber(sub(head, TW + 1, TW + DW)) then return nil end
  local dt = now - at
  local out = {0, now, 0, 0, 0, 0, now, tonumber(v[2]) or 0}
  for i = 0, NL - 1 do
    local kept = v[4 + i]
    if not kept then return nil end
    local p, rem = RHEAD + 1 + KHEAD + RLIM * i, tonumber(sub(kept, 1, DW))
    out[p], out[p + 3] = rem, 0
    for d = 1, 3 do
      -- reset, wait and refill, then (out[p + 4]), as kept less the time
      -- that passed; 0 and -1 stand, and so does the refill of a limit
      -- where nothing counts (a claim from now)
      local x = tonumber(sub(kept, d * DW + 1, (d + 1) * DW))
      if x > 0 and not (d == 3 and rem == P[STRIDE * i + P_CAP]) then x = x - dt end
      if d == 3 then out[p + 4] = x else out[p + d] = x end
    end
  end
  return out
end
