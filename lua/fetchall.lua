-- fetchall: the fetch of algorithms with few fields per identity (fixed
-- window, token bucket): read them all.
-- s.x is when the key expires (µs), 0 if unknown.
local function fetch(key, now, nf, P, nl)
  local f = {}
  for i = 1, nf do f[i] = i end
  f[nf + 1] = 'x'
  local s = redis.call('HMGET', key, unpack(f))
  for i = 1, nf do s[i] = tonumber(s[i]) or 0 end
  s.x, s[nf + 1] = tonumber(s[nf + 1]) or 0, nil
  return s
end
