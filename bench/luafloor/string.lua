#!lua name=luacost
-- hash.lua's work with the identity kept as one string instead of a hash
-- (../luacost.sh -s a -l luafloor/string.lua): GET, numbers sliced at fixed
-- places, the string rebuilt and SET with its expiry. Not a limiter: it asks
-- whether a layout of one value would cost Redis less (docs/cost.md).
local fmt, sub
local function run(KEYS, ARGV)
  if not fmt then fmt, sub = string.format, string.sub end
  local tm = redis.call('TIME')
  local now = tm[1] * 1000000 + tm[2]
  local width, ring, period, capacity = 50000, 21, 1000000, 10000000
  local k = (now - now % width) / width
  -- time (16) refund count (4) expiry (16) resend IDs (48) sum (10), then per
  -- sub-bucket its cost (8) and latest admission (8)
  local head, slot = 94, 16
  local cb, eb = head + (k % ring) * slot, head + ((k + 1) % ring) * slot
  local ts, empty = fmt('%016d', now), string.rep('0', head + ring * slot)
  local R = {now}
  for c = 1, #ARGV - 4 do
    local key = KEYS[c]
    local s = redis.call('GET', key) or empty
    local sum, cur = sub(s, 85, 94) + 0, sub(s, cb + 1, cb + 8) + 0
    local edge = sub(s, eb + 1, eb + 8) + 0
    local d = sub(s, 43, 84) .. ARGV[4 + c]
    s = ts .. sub(s, 17, 36) .. d .. fmt('%010d', sum + 1) .. sub(s, head + 1, cb) .. fmt('%08d%08d', cur + 1, now - k * width) .. sub(s, cb + slot + 1)
    redis.call('SET', key, s, 'PX', 2000)
    R[#R + 1], R[#R + 2], R[#R + 3] = edge, capacity - sum - 1, period
  end
  return R
end
redis.register_function('luacost', run)
