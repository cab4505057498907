-- reset.lua: the time of a call, and the reset operation (see script.lua).

-- now is the time of the call: its argument, or Redis TIME.
local function clock(arg)
  local now = tonumber(arg)
  if now == 0 then
    local tm = redis.call('TIME')
    now = tm[1] * 1000000 + tm[2]
  end
  return now
end

-- opreset is the reset ('x').
local function opreset()
  -- Reset: the key keeps only its field F_GEN, with the next epoch in its
  -- high bits (the low bits count refunds), for as long as a charge made
  -- before the Reset could still count: a refund of such a charge then
  -- finds another epoch and gives nothing back.
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  local keep = tonumber(ARGV[2])
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > keep then keep = pttl end
  local g = 0
  local v = redis.pcall('HGET', KEYS[1], F_GEN)
  if type(v) == 'string' then g = tonumber(v) or 0 end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], F_GEN, fmt('%d', (floor(g / EPOCH) + 1) * EPOCH))
  redis.call('PEXPIRE', KEYS[1], keep)
  return 1
end
