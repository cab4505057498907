-- resend.lua: resend IDs, so that a resent call counts once (see
-- script.lua and store/redis/resend.go).

-- Resend IDs. Every call carries an ID (RIDLEN characters) that go-redis
-- writes again, prefixed with '!' and followed by the call's horizon (µs;
-- 0: none), when it sends the call again after losing its reply
-- (store/redis/resend.go). A key's field F_RESENDS holds, after TW digits of the time
-- its last ID was pushed out, the IDs of its last RIDN charges.
local RESEND_LOST = 'RESEND ratelimit: a resent call found no record of its first run (more charges of its key came between than the key remembers); nothing was charged'

-- resend splits the resend ID argument: the ID, whether this is a resend,
-- and the horizon within which its first run ran.
local function resend(arg)
  if sub(arg, 1, 1) ~= '!' then return arg, false, 0 end
  return sub(arg, 2, RIDLEN + 1), true, tonumber(sub(arg, RIDLEN + 2)) or 0
end

-- resendfound reports whether d lists the ID rid.
local function resendfound(d, rid)
  if not d or rid == '' then return false end
  local q = find(d, rid, TW + 1, true)
  while q and (q - TW - 1) % RIDLEN ~= 0 do q = find(d, rid, q + 1, true) end
  return q ~= nil
end

-- resendlost reports whether d may have pushed out an ID charged within
-- horizon of now (any time, for horizon 0).
local function resendlost(d, now, horizon)
  if not d then return false end
  local pt = tonumber(sub(d, 1, TW)) or 0
  return pt > 0 and (horizon == 0 or pt >= now - horizon)
end

-- resendrecord returns d with rid added, the oldest ID pushed out (and the
-- time noted) when it holds RIDN already.
local function resendrecord(d, rid, now)
  local pt, ids = ZEROT, ''
  if d then pt, ids = sub(d, 1, TW), sub(d, TW + 1) end
  ids = ids .. rid
  if #ids > RIDLEN * RIDN then ids, pt = sub(ids, RIDLEN + 1), fmt(TFMT, now) end
  return pt .. ids
end
