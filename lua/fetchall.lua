-- fetchall: the fetch of algorithms with few fields per identity (fixed
-- window, token bucket): read them all.
-- s[nf + 1] is when the key expires (µs), 0 if unknown.
local function fetch(key, now, nf, P, nl)
  local f = {}
  for i = 1, nf do f[i] = i end
  f[nf + 1] = 'x'
  local s = redis.call('HMGET', key, unpack(f))
  for i = 1, nf + 1 do s[i] = tonumber(s[i]) or 0 end
  return s
end
