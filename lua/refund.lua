-- refund: take back a charge made at a given time (Redis Cluster, when
-- another identity's script denied the request). Preceded by one
-- algorithm's refund function. KEYS: one hash. ARGV: as take, with the
-- charge's time in place of now.
local tonumber = tonumber
local at, cost, nf, nl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local P, fields = {}, {}
for a = 1, 4 * nl do P[a] = tonumber(ARGV[5 + a]) end
for f = 1, nf do fields[f] = f end
local s = redis.call('HMGET', KEYS[1], unpack(fields))
if not s[1] then return 0 end
for f = 1, nf do s[f] = tonumber(s[f]) or 0 end
local w, o = {}, 1
for i = 1, nl do o = refund(s, at, P, 4 * (i - 1), cost, w, o) end
if o > 1 then redis.call('HSET', KEYS[1], unpack(w)) end
return (o - 1) / 2
