#!lua name=luacost
-- The floor of a one-limit decision in the stored layout, for
-- ../luacost.sh -s a -l luafloor/hash.lua: per call of a run of calls alike
-- ('u', as the bench's section a sends them), the same HMGET of eight fields
-- (the time, expiry, resend IDs and refund count, then the ring's sum and its
-- current, edge and next sub-buckets of a 1/s window of 20) and the same HSET
-- of four (the time, resend IDs, sum and current sub-bucket) as the script's
-- lean path, with the least Lua between them: no edge, refill, expiry or
-- check of any kind. Not a limiter: what our script costs beyond it is the
-- decision's own Lua (docs/cost.md).
local fmt, sub, find
local NAMES = {'1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', '16', '17', '18', '19', '20', '21', '22', '23'}
local function run(KEYS, ARGV)
  if not fmt then fmt, sub, find = string.format, string.sub, string.find end
  local tm = redis.call('TIME')
  local now = tm[1] * 1000000 + tm[2]
  local width, ring, period, capacity = 50000, 21, 1000000, 10000000
  local k = (now - now % width) / width
  local cn, en, nn = NAMES[3 + k % ring], NAMES[3 + (k + 1) % ring], NAMES[3 + (k + 2) % ring]
  local ts = fmt('%d', now)
  local R = {now}
  for c = 1, #ARGV - 4 do
    local key = KEYS[c]
    local v = redis.call('HMGET', key, '1', 'x', 'd', 'g', '2', cn, en, nn)
    local sum, cur = (v[5] or 0) + 0, 0
    local cs = v[6]
    if cs and cs ~= '0' then cur = sub(cs, 1, find(cs, ':', 1, true) - 1) + 0 end
    local rid, d = ARGV[4 + c], v[3]
    if not d then d = '0000000000000000' .. rid elseif #d < 64 then d = d .. rid else d = ts .. sub(d, 23) .. rid end
    redis.call('HSET', key, '1', ts, '2', fmt('%d', sum + 1), cn, fmt('%d:%d', cur + 1, now - k * width), 'd', d)
    R[#R + 1], R[#R + 2], R[#R + 3] = 0, capacity - sum - 1, period
  end
  return R
end
redis.register_function('luacost', run)
