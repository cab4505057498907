-- Sliding window with sub-buckets. Mirrors store/algorithm.go.
-- P holds 4 numbers per limit from index j+1: capacity, width (sub-bucket,
-- µs), n (sub-buckets), off (first field, 0-based). A limit's fields: the
-- running sum of the sub-buckets counted at the last charge, then a ring of
-- n+1 sub-buckets (bucket b at ring slot b % (n+1)). s holds the fields
-- read so far, as numbers; s[1] is the time of the last charge.
--
-- Reading a Redis hash costs in proportion to the fields read, so the allow
-- path reads only the time, the sums and the current sub-buckets (fetch),
-- and loads more (need) only when the window moved by two sub-buckets or
-- more, or to compute a denial's retry time.
local floor = math.floor

local function fetch(key, now, nf, P, nl)
  local f, m = {1}, 2
  for j = 0, 4 * (nl - 1), 4 do
    local off = P[j + 4]
    f[m], f[m + 1], m = off + 1, off + 2 + floor(now / P[j + 2]) % (P[j + 3] + 1), m + 2
  end
  f[m] = 'x' -- when the key expires (µs), 0 if unknown
  local v = redis.call('HMGET', key, unpack(f))
  local s = {}
  for i = 1, m - 1 do s[f[i]] = tonumber(v[i]) or 0 end
  s[nf + 1] = tonumber(v[m]) or 0 -- not a field of any limit
  return s
end

-- need loads the ring slots of buckets from..to that were not read yet.
local function need(s, key, ring, n1, from, to)
  local f, m
  for b = from, to do
    local x = ring + b % n1
    if s[x] == nil then
      if not f then f, m = {}, 1 end
      f[m], m = x, m + 1
    end
  end
  if not f then return end
  local v = redis.call('HMGET', key, unpack(f))
  for i = 1, m - 1 do s[f[i]] = tonumber(v[i]) or 0 end
end

local function check(s, t, P, j, c, key)
  local cap, w, n = P[j + 1], P[j + 2], P[j + 3]
  local sum, ring, n1 = P[j + 4] + 1, P[j + 4] + 2, n + 1
  local k, h = floor(t / w), floor(s[1] / w)
  local used = 0
  if k - h < n1 then
    -- Buckets h-n .. k-n-1 left the window; their slots are those of h+1 .. k.
    need(s, key, ring, n1, h + 1, k)
    used = s[sum]
    for b = h + 1, k do used = used - s[ring + b % n1] end
  end
  if c > cap then return used, -1 end
  if used + c <= cap then return used, 0 end
  need(s, key, ring, n1, k - n, h)
  local need_, freed = used + c - cap, 0
  for b = k - n, h do
    freed = freed + s[ring + b % n1]
    if freed >= need_ then return used, (b + n1) * w - t end
  end
  return used, -1
end

local function report(s, t, P, j, used, charged, key)
  local w, n = P[j + 2], P[j + 3]
  local ring, n1 = P[j + 4] + 2, n + 1
  local rem = P[j + 1] - used - charged
  local k = floor(t / w)
  if charged > 0 then return rem, (k + n1) * w - t end
  if used == 0 then return rem, 0 end
  local h = floor(s[1] / w)
  need(s, key, ring, n1, k - n, h)
  for b = h, k - n, -1 do
    if s[ring + b % n1] ~= 0 then return rem, (b + n1) * w - t end
  end
  return rem, 0
end

-- charge appends the changed field, value pairs to out from index o and
-- returns the next free index. Slots never read are stale: written as 0.
local function charge(s, t, P, j, used, c, out, o, key)
  local w, n = P[j + 2], P[j + 3]
  local sum, ring, n1 = P[j + 4] + 1, P[j + 4] + 2, n + 1
  local k, h = floor(t / w), floor(s[1] / w)
  local lo = h + 1
  if lo < k - n then lo = k - n end
  for b = lo, k - 1 do
    local f = ring + b % n1
    if s[f] ~= 0 then
      s[f] = 0
      out[o], out[o + 1], o = f, 0, o + 2
    end
  end
  local f = ring + k % n1
  if k > h then
    s[f] = 0
  else
    need(s, key, ring, n1, k, k)
  end
  s[f] = s[f] + c
  out[o], out[o + 1], out[o + 2], out[o + 3] = f, s[f], sum, used + c
  return o + 4
end
