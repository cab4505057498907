-- The Redis store's one script: take (decide and charge a request for every
-- key, all or nothing), refund (undo one charge) and reset (forget an
-- identity). Its source is this opening and, after it, lean.lua (the lean
-- path of the common call), reset.lua, resend.lua, counters.lua, refund.lua
-- and take.lua, joined by script.go. It mirrors the memory store (store/memory), the reference:
-- the same state, laid out as internal/layout names it, the same integer
-- arithmetic (microseconds; the approximation's one weighted product in
-- IEEE doubles, computed in the same order), the same order of decisions.
-- The conformance suite (store/storetest) holds the two to identical
-- answers.
--
-- script.go puts before it a prelude of names (the kinds K_*, a limit's
-- parameters P_* and STRIDE, the hash fields F_* and the time's field
-- number I_TIME, the numbers RIDLEN, RIDN, QLEN, MAXQ, EPOCH, MAXREP, and
-- RHEAD, KHEAD, RLIM: the sizes of a take reply's header, of a key's head
-- and of a limit's part; the policy header's positions Q_* and size QHEAD;
-- the expiry slack XSLACK; BSEP, which joins a sub-bucket's cost and
-- latest admission in its one field, and BFMT, the format of that field)
-- and the line "local BAKED, NAMES = ...": nil,
-- nil, or the policy as data (the numbers the unbaked script reads from
-- ARGV) and the names of its hash fields from 1 on ('1', '2', ...;
-- NAMES[x] is nm(x), for the lean path).
--
-- ARGV[1] is the operation:
--   't' take. ARGV: now (µs; 0 = Redis TIME), cost, mode ('1': grant up to
--       cost), max delay (µs; > 0 reserves), resend ID ('' none; see
--       resend below), has ID ('1'), then the policy unless baked.
--   'f' take, the common call: one key, no request ID, a plain take.
--       ARGV: now, cost, resend ID, then the policy unless baked. It
--       replies as 't' does, by a leaner path.
--       KEYS: one hash per identity; then, when the request has an ID,
--       one ID record (a hash: n repeats, e expiry µs, v the first answer)
--       per identity. Reply: {allowed, now, granted, release, flags (2: a
--       key of another type was replaced), then per key: kind (0 decided,
--       1 charged, 2 answered by its ID record, 3 a resend of a charged
--       call), at, the key's refund count, then per limit: remaining,
--       reset, retry, mark (a token bucket's TAT right after a charge,
--       else 0), refill (how long it admits no more than remaining)}.
--   'r' refund. ARGV: now, cost, the policy unless baked, then per key the
--       time of the charge, the key's refund count then, and one mark per
--       limit. KEYS: the identities charged. Reply: how many gave back.
--   'x' reset. ARGV: how long to keep the key (ms). KEYS[1]: the identity.
--       Reply: 1 when the key existed, else 0.
-- The policy: TTL (ms), NL (limits), BLOCK (µs), IDTTL (µs), RES ('1' when
-- every limit can reserve), then STRIDE numbers per limit (P_* order).
local tonumber, floor, ceil, fmt, sub, find, byte = tonumber, math.floor, math.ceil, string.format, string.sub, string.find, string.byte
local ZERO16 = '0000000000000000'
local OP = ARGV[1]

-- nm names the numbered hash field x: its digits, made without a printf
-- (Redis would turn a number argument into digits with a costlier one) or
-- a call to floor.
local char = string.char
local function nm(x)
  if x < 10 then return char(48 + x) end
  if x < 100 then
    local u = x % 10
    return char(48 + (x - u) / 10, 48 + u)
  end
  return fmt('%d', x)
end

