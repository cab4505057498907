#!lua name=luacost
-- hash.lua with a candidate layout (../luacost.sh -s a -l luafloor/packed.lua):
-- the key's time, expiry and refund count and the ring's sum packed in one
-- field of fixed width (under the 64 bytes of a compact hash), so that a call
-- reads five fields, not eight, and writes three, not four. Not a limiter:
-- what the layout would save before any decision (docs/cost.md).
local fmt, sub, find
local NAMES = {'1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', '16', '17', '18', '19', '20', '21', '22', '23'}
local function run(KEYS, ARGV)
  if not fmt then fmt, sub, find = string.format, string.sub, string.find end
  local tm = redis.call('TIME')
  local now = tm[1] * 1000000 + tm[2]
  local width, ring, period, capacity = 50000, 21, 1000000, 10000000
  local k = (now - now % width) / width
  local cn, en, nn = NAMES[3 + k % ring], NAMES[3 + (k + 1) % ring], NAMES[3 + (k + 2) % ring]
  -- the packed field: time (16), expiry (16), refund count (10), sum (12)
  local R = {now}
  for c = 1, #ARGV - 4 do
    local key = KEYS[c]
    local v = redis.call('HMGET', key, 'h', 'd', cn, en, nn)
    local h = v[1]
    local expiry, gen, sum = now + 2000000, 0, 0
    if h then expiry, gen, sum = sub(h, 17, 32) + 0, sub(h, 33, 42) + 0, sub(h, 43, 54) + 0 end
    local cur, cs = 0, v[3]
    if cs and cs ~= '0' then cur = sub(cs, 1, find(cs, ':', 1, true) - 1) + 0 end
    local rid, d = ARGV[4 + c], v[2]
    if not d then d = '0000000000000000' .. rid elseif #d < 64 then d = d .. rid else d = sub(d, 1, 16) .. sub(d, 23) .. rid end
    redis.call('HSET', key, 'h', fmt('%016d%016d%010d%012d', now, expiry, gen, sum + 1), cn, fmt('%d:%d', cur + 1, now - k * width), 'd', d)
    R[#R + 1], R[#R + 2], R[#R + 3] = gen, capacity - sum - 1, period
  end
  return R
end
redis.register_function('luacost', run)
