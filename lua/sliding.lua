-- sliding.lua: a sliding window by sub-buckets: each sub-bucket's cost
-- and latest admission in one field (BSEP between them), and the ring's
-- sum, as store/memory's sliding.go counts them (see script.lua;
-- counters.lua uses these).

-- bdecode sets s[x] and s[-x] to the cost and latest admission of the
-- sub-bucket whose field x holds v (nil or '0': none).
local function bdecode(s, x, v)
  if not v or v == '0' then
    s[x], s[-x] = 0, 0
    return
  end
  local p = find(v, BSEP, 1, true)
  s[x], s[-x] = tonumber(sub(v, 1, p - 1)), tonumber(sub(v, p + 1))
end

-- bencode is the field of a sub-bucket that holds cost c, its latest
-- admission at offset l.
local function bencode(c, l)
  if c == 0 then return '0' end
  return fmt(BFMT, c, l)
end

-- bload loads the fields of sub-buckets from..to.
local function bload(s, key, j, from, to)
  local off, n1 = P[j + P_HASH], P[j + P_N] + 1
  local f, m = nil, 0
  for b = from, to do
    local x = off + 1 + b % n1
    if s[x] == nil then
      if not f then f = {} end
      f[m + 1], m = x, m + 1
    end
  end
  if m == 0 then return end
  local v = redis.call('HMGET', key, unpack(f))
  for i = 1, m do bdecode(s, f[i], v[i]) end
end

-- badvance appends the changed field, value pairs of a sub-bucket ring
-- moved from the last charge's sub-bucket (s[I_TIME]) to t's: the
-- sub-buckets it passes, t's included, are cleared and leave its sum
-- (store/memory's advanceBuckets).
local function badvance(s, key, j, t, out, o)
  local w, off, n = P[j + P_WIDTH], P[j + P_HASH], P[j + P_N]
  local n1 = n + 1
  local k, h = floor(t / w), floor(s[I_TIME] / w)
  if s[I_TIME] ~= 0 and k <= h then return o end
  local total = 0
  if s[I_TIME] ~= 0 and k - h < n1 then
    bload(s, key, j, h + 1, k)
    total = s[off]
    for b = h + 1, k do total = total - s[off + 1 + b % n1] end
  end
  local lo = h + 1
  if lo < k - n then lo = k - n end
  if s[I_TIME] == 0 then lo = k end -- never charged: no sub-bucket to clear
  for b = lo, k do
    local x = off + 1 + b % n1
    if s[x] ~= 0 then out[o], out[o + 1], o = x, '0', o + 2 end
    s[x], s[-x] = 0, 0
  end
  s[off] = total
  out[o], out[o + 1] = off, total
  return o + 2
end

-- bcharge appends the changed field, value pairs of c units charged at t
-- to sub-buckets (store/memory's chargeBuckets): the ring moves to t's
-- (badvance), which takes the units, t its latest admission.
local function bcharge(s, key, j, t, c, out, o)
  o = badvance(s, key, j, t, out, o)
  local w, off, n1 = P[j + P_WIDTH], P[j + P_HASH], P[j + P_N] + 1
  local k = floor(t / w)
  local x = off + 1 + k % n1
  bload(s, key, j, k, k)
  s[x], s[-x] = s[x] + c, t - k * w
  s[off] = s[off] + c
  out[o], out[o + 1] = x, bencode(s[x], s[-x])
  out[o + 2], out[o + 3] = off, s[off]
  return o + 4
end
