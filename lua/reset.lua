-- reset: forget one identity's counters. The key keeps only its field g,
-- with the next epoch in its high bits (one Reset is 2^32; the low bits
-- count refunds), for as long as a charge made before the Reset could still
-- count: a refund of such a charge then finds another epoch and gives
-- nothing back, instead of undoing charges made after the Reset. Mirrors
-- store/memory.go (Reset).
-- KEYS[1]: the identity's hash. ARGV[1]: the policy's TTL, ms (the key is
-- kept that long, or as long as it was to be kept if that is longer).
-- Reply: 1 when the key existed, else 0.
local EPOCH = 4294967296
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local keep = tonumber(ARGV[1])
local pttl = redis.call('PTTL', KEYS[1])
if pttl > keep then keep = pttl end
local g = 0
local v = redis.pcall('HGET', KEYS[1], 'g')
if type(v) == 'string' then g = tonumber(v) or 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'g', string.format('%d', (math.floor(g / EPOCH) + 1) * EPOCH))
redis.call('PEXPIRE', KEYS[1], keep)
return 1
