package lua

import (
	"fmt"
	"strconv"
	"strings"
)

// CommonMark opens the common path in a script BakeFast returns.
const CommonMark = "-- the common path"

// lit is a field name as a Lua string literal.
func lit(f int64) string { return "'" + strconv.FormatInt(f, 10) + "'" }

// names writes a binary search on j (lo..hi, of a ring of size ring whose
// first cost field is base) that sets limit i's an, am (the sub-bucket j's
// cost and latest admission) and bn, bm (the next sub-bucket's) to their
// field names.
func names(s *strings.Builder, i int, base, ring, lo, hi int64, ind string) {
	if lo == hi {
		nx := (lo + 1) % ring
		fmt.Fprintf(s, "%san%d, am%d, bn%d, bm%d = %s, %s, %s, %s\n", ind, i, i, i, i,
			lit(base+lo), lit(base+lo+ring), lit(base+nx), lit(base+nx+ring))
		return
	}
	mid := (lo + hi) / 2
	fmt.Fprintf(s, "%sif j <= %d then\n", ind, mid)
	names(s, i, base, ring, lo, mid, ind+"  ")
	fmt.Fprintf(s, "%selse\n", ind)
	names(s, i, base, ring, mid+1, hi, ind+"  ")
	fmt.Fprintf(s, "%send\n", ind)
}

// hot writes the common path of a baked fast script: Lua written for one
// policy, every parameter a literal, one block per limit and no table but
// the HMGET reply and its own reply. It answers a call that every limit
// admits, on a key with no running penalty, no resend of this call and a
// clock that did not step back, when each limit's state is at hand: on a
// sliding window, a last charge in the current or previous sub-bucket or
// before the whole window; on a log (SlidingLog, or a small SlidingWindow
// kept exactly), a charge of one unit. It reads and writes what fast.lua
// does then and replies the same, but for b and g on a new key (below).
// Every other call (a denial, a peek at cost 0, a cost above a capacity, a
// sub-bucket gap, a penalty, a resend, another type at the key) goes to
// general (fast.lua) with the time and the HMGET reply already read, before
// anything is written; a policy with a log that fast.lua does not read whole
// up front (more than 8 chunk fields) goes to general at once.
//
// Numbers are written as fast.lua writes them: field names as the same
// digits (string literals: picked by a search on the index for the current
// and next sub-bucket, made by nm for a lapsed sub-bucket or a chunk),
// values through string.format('%d'), and every product or quotient as a
// Lua expression, so the doubles are those counters.lua computes.
func hot(b Baked) string {
	var s strings.Builder
	nl := len(b.P) / 7
	hasLog, hasRing := false, false
	for i := 0; i < nl; i++ {
		switch b.P[7*i] {
		case 1:
			if (b.P[7*i+1]+b.P[7*i+6]-1)/b.P[7*i+6] > 8 { // a log fast.lua does not read whole
				return CommonMark + "\nreturn general()\n"
			}
			hasLog, hasRing = true, true
		case 0:
			hasRing = true
		}
	}
	minCap := int64(-1)
	for i := 0; i < nl; i++ {
		if c := b.P[7*i+1]; minCap < 0 || c < minCap {
			minCap = c
		}
	}
	w := func(format string, a ...any) { fmt.Fprintf(&s, format, a...) }
	w(`%s
local now = tonumber(ARGV[1])
if now == 0 then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
end
local cost, rid, key = tonumber(ARGV[2]), ARGV[3], KEYS[1]
if cost < 1 or cost > %d or string.byte(rid, 1) == 33 then return general(now) end
local floor, fmt = math.floor, string.format
`, CommonMark, minCap)
	if hasLog { // a log's common path charges one unit
		w("if cost ~= 1 then return general(now) end\n")
	}
	// The fields, in fields()'s order: field numbers, or the Lua
	// expressions of a sub-bucket ring's current and next sub-bucket.
	fields := []string{"'1'", "'b'", "'x'", "'d'", "'g'"}
	if b.Reserve {
		fields = append(fields, "'q'") // pending reservations: general folds them in
	}
	if hasRing {
		// A sub-bucket's or a log chunk's field name, made without
		// string.format: Redis turns a number argument into digits with a
		// "%.17g" printf, which costs more than the rest of a short call.
		w(`local char = string.char
local function nm(x)
  if x < 10 then return char(48 + x) end
  if x < 100 then return char(48 + floor(x / 10), 48 + x %% 10) end
  return fmt('%%d', x)
end
`)
	}
	at := make([]int, nl) // where limit i's fields start in the reply, 1-based
	for i := 0; i < nl; i++ {
		kind, width, n, off := b.P[7*i], b.P[7*i+2], b.P[7*i+3], b.P[7*i+5]
		at[i] = len(fields) + 1
		switch kind {
		case 0:
			w("local k%d = floor(now / %d)\n", i, width)
			w("local b%d = %d + (k%d + 1) %% %d\n", i, off+1, i, n+1)
			// The names of the current and the next sub-bucket's cost and
			// latest admission, as literals picked by a search on the
			// sub-bucket's index: no call and no new string.
			w("local an%[1]d, am%[1]d, bn%[1]d, bm%[1]d\ndo\n  local j = k%[1]d %% %[2]d\n", i, n+1)
			names(&s, i, off+1, n+1, 0, n, "  ")
			w("end\n")
			fields = append(fields, lit(off), fmt.Sprintf("an%d", i), fmt.Sprintf("am%d", i),
				fmt.Sprintf("bn%d", i), fmt.Sprintf("bm%d", i))
		case 2:
			w("local k%d = floor(now / %d)\n", i, width)
			fields = append(fields, lit(off), lit(off+1))
		case 3:
			fields = append(fields, lit(off))
		case 1:
			fields = append(fields, lit(off))
			for c := int64(1); c <= (b.P[7*i+1]+b.P[7*i+6]-1)/b.P[7*i+6]; c++ {
				fields = append(fields, lit(off+c))
			}
		default:
			w("local k%d = floor(now / %d)\n", i, width)
			fields = append(fields, lit(off), lit(off+1), lit(off+2))
		}
	}
	w("local v = redis.pcall('HMGET', key, %s)\n", strings.Join(fields, ", "))
	w(`if v.err then return general(now, v) end
local s1, sb, sx, d = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, v[4]
if s1 > now or sb > now then return general(now, v) end
`)
	if b.Reserve {
		w("if v[6] and v[6] ~= '' then return general(now, v) end\n")
	}
	if hasLog {
		// ls is lslot: the time of the i-th oldest unit of a log whose
		// oldest slot is ptr, whose chunks start at v[m].
		w(`local sub, ts = string.sub, fmt('%%016d', now)
local function ls(m, R, cs, ptr, i)
  local pos = (ptr + i) %% R
  local c = v[m + floor(pos / cs)]
  if not c then return 0 end
  local o = (pos %% cs) * 16
  if #c < o + 16 then return 0 end
  return tonumber(sub(c, o + 1, o + 16))
end
`)
	}
	if hasRing {
		w("local zs, zo = nil, 0 -- sub-bucket fields to clear: names and zeros\n")
	}
	// Each limit leaves its reply in r<i> (remaining), e<i> (reset) and, for
	// a token bucket, q<i> (the new arrival time), and the values it writes
	// in x<i>, y<i>, z<i>; hset lists the fields and values.
	var hset, reply []string
	clears := []int{}
	for i := 0; i < nl; i++ {
		kind, capacity, width, n, period, off := b.P[7*i], b.P[7*i+1], b.P[7*i+2], b.P[7*i+3], b.P[7*i+4], b.P[7*i+5]
		m := at[i]
		switch kind {
		case 0: // sub-bucket ring (store/algorithm.go's buckets)
			// The last charge in this sub-bucket or the previous one: all
			// at hand. Two or more sub-buckets ago (but within the
			// window): the ones in between lapsed, and their cost, read by
			// a second HMGET, leaves the sum and is cleared. A window or
			// more ago: nothing counts, every other sub-bucket is cleared
			// (the next one, the only one read, when it holds cost).
			w(`local r%[2]d, x%[2]d, y%[2]d, z%[2]d
do
  local h = floor(s1 / %[1]d)
  local u, tot, cur = 0, 0, 0
  if k%[2]d - h <= 1 then
    tot, cur = tonumber(v[%[3]d]) or 0, tonumber(v[%[4]d]) or 0
    if k%[2]d > h then tot, cur = tot - cur, 0 end
  elseif k%[2]d - h < %[7]d then
    tot = (tonumber(v[%[3]d]) or 0) - (tonumber(v[%[4]d]) or 0)
    local f = {}
    for q = h + 1, k%[2]d - 1 do f[q - h] = nm(%[9]d + q %% %[7]d) end
    local g = redis.call('HMGET', key, unpack(f))
    for q = h + 1, k%[2]d - 1 do
      local c = tonumber(g[q - h]) or 0
      if c ~= 0 then
        tot = tot - c
        if s1 ~= 0 then
          if not zs then zs = {} end
          zs[zo + 1], zs[zo + 2], zs[zo + 3], zs[zo + 4], zo = f[q - h], '0', nm(%[9]d + q %% %[7]d + %[7]d), '0', zo + 4
        end
      end
    end
  elseif s1 ~= 0 then
    local e = tonumber(v[%[5]d]) or 0
    for q = k%[2]d - %[10]d, k%[2]d - 1 do
      local x = %[9]d + q %% %[7]d
      if x ~= b%[2]d or e ~= 0 then
        if not zs then zs = {} end
        zs[zo + 1], zs[zo + 2], zs[zo + 3], zs[zo + 4], zo = nm(x), '0', nm(x + %[7]d), '0', zo + 4
      end
    end
  end
  if k%[2]d - h < %[7]d then
    u = tot
    local e = tonumber(v[%[5]d]) or 0
    if e ~= 0 and (tonumber(v[%[6]d]) or 0) <= now - k%[2]d * %[1]d then u = u - e end
  end
  if u + cost > %[8]d then return general(now, v) end
  r%[2]d, x%[2]d, y%[2]d, z%[2]d = %[8]d - u - cost, fmt('%%d', cur + cost), fmt('%%d', now - k%[2]d * %[1]d), fmt('%%d', tot + cost)
end
`, width, i, m, m+1, m+3, m+4, n+1, capacity, off+1, n)
			hset = append(hset, fmt.Sprintf("an%d, x%d, am%d, y%d, %s, z%d", i, i, i, i, lit(off), i))
			reply = append(reply, fmt.Sprintf("r%d, %d, 0, 0", i, period))
			clears = append(clears, i)
		case 1: // a log of the last R units' times, in chunks of cs
			cs := b.P[7*i+6]
			w(`local r%[1]d, p%[1]d, cn%[1]d, cv%[1]d
do
  local ptr = tonumber(v[%[2]d]) or 0
  if ls(%[3]d, %[4]d, %[5]d, ptr, 0) + %[6]d > now then return general(now, v) end
  local lo, hi = 0, %[4]d
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if ls(%[3]d, %[4]d, %[5]d, ptr, mid) + %[6]d <= now then lo = mid + 1 else hi = mid end
  end
  local ci = floor(ptr / %[5]d)
  local str, nsl = v[%[3]d + ci] or '', %[5]d
  if (ci + 1) * %[5]d > %[4]d then nsl = %[4]d - ci * %[5]d end
  if #str %% 16 ~= 0 or #str > nsl * 16 then return general(now, v) end
  if #str < nsl * 16 then str = str .. string.rep('0', nsl * 16 - #str) end
  local o = (ptr %% %[5]d) * 16
  r%[1]d, p%[1]d = lo - 1, fmt('%%d', (ptr + 1) %% %[4]d)
  cn%[1]d, cv%[1]d = nm(%[7]d + ci), sub(str, 1, o) .. ts .. sub(str, o + 17)
end
`, i, m, m+1, capacity, cs, period, off+1)
			hset = append(hset, fmt.Sprintf("cn%d, cv%d, %s, p%d", i, i, lit(off), i))
			reply = append(reply, fmt.Sprintf("r%d, %d, 0, 0", i, period))
		case 2: // fixed window
			w(`local r%[2]d, e%[2]d, x%[2]d = 0, 0, 0
do
  local u = 0
  if (tonumber(v[%[1]d]) or 0) == k%[2]d then u = tonumber(v[%[3]d]) or 0 end
  if u + cost > %[4]d then return general(now, v) end
  r%[2]d, x%[2]d = %[4]d - u - cost, fmt('%%d', u + cost)
  if u + cost > 0 then e%[2]d = (k%[2]d + 1) * %[5]d - now end
end
`, m, i, m+1, capacity, width)
			hset = append(hset, fmt.Sprintf("%s, fmt('%%d', k%d), %s, x%d", lit(off), i, lit(off+1), i))
			reply = append(reply, fmt.Sprintf("r%d, e%d, 0, 0", i, i))
		case 3: // token bucket (GCRA): the theoretical arrival time
			w(`local r%[4]d, q%[4]d = 0, tonumber(v[%[1]d]) or 0
if q%[4]d < now then q%[4]d = now end
if q%[4]d + cost * %[2]d - now > %[3]d * %[2]d then return general(now, v) end
q%[4]d = q%[4]d + cost * %[2]d
do
  local x = %[3]d * %[2]d - (q%[4]d - now)
  if x > 0 then r%[4]d = floor(x / %[2]d) end
end
`, m, width, capacity, i)
			hset = append(hset, fmt.Sprintf("%s, fmt('%%d', q%d)", lit(off), i))
			reply = append(reply, fmt.Sprintf("r%d, q%d - now, 0, q%d", i, i, i))
		default: // two windows weighted (CounterApprox)
			w(`local r%[7]d, e%[7]d, x%[7]d, z%[7]d = 0, 0, 0, 0
do
  local win, u, tot = tonumber(v[%[1]d]) or 0, 0, 0
  if win == k%[2]d then
    u, tot = tonumber(v[%[3]d]) or 0, tonumber(v[%[4]d]) or 0
  elseif win == k%[2]d - 1 then
    tot = tonumber(v[%[3]d]) or 0
  end
  local e = now - k%[2]d * %[5]d
  local a = floor((%[6]d - u) - tot * (%[5]d - e) / %[5]d)
  if a < 0 then a = 0 end
  if cost > a then return general(now, v) end
  r%[7]d, x%[7]d, z%[7]d = a - cost, fmt('%%d', u + cost), fmt('%%d', tot)
  if u + cost > 0 then
    e%[7]d = (k%[2]d + 2) * %[5]d - now
  elseif tot > 0 then
    e%[7]d = (k%[2]d + 1) * %[5]d - now
  end
end
`, m, i, m+1, m+2, width, capacity, i)
			hset = append(hset, fmt.Sprintf("%s, fmt('%%d', k%d), %s, x%d, %s, z%d", lit(off), i, lit(off+1), i, lit(off+2), i))
			reply = append(reply, fmt.Sprintf("r%d, e%d, 0, 0", i, i))
		}
	}
	all := strings.Join(hset, ", ")
	// Sub-buckets to clear (after a gap) go in the same HSET, through a
	// table; every other call writes with the arguments listed.
	first := "if"
	// A new key (no charge, no penalty, no expiry recorded; at most an
	// epoch) gets the fields every call asks for first, b and g, written
	// first: a field a hash lacks costs HMGET a scan of every field, and
	// Redis keeps a small hash's fields in the order they were first
	// written. b = 0 and g = 0 mean what no b and no g mean. A hash with a
	// value over 64 bytes (a log of 32 times to a chunk) is a hash table,
	// where a lookup costs the same either way: there they would only take
	// memory, so the branch is never taken.
	fresh := "not (v[1] or v[2] or v[3])"
	for i := 0; i < nl; i++ {
		if b.P[7*i] == 1 && b.P[7*i+6]*16 > 64 {
			fresh = "false"
		}
	}
	// The resend ID joins the key's list (counters.lua, resendrecord).
	w(`local t, need = fmt('%%d', now), now + %[1]d * 1000
if rid ~= '' then
  local pt, ids = '0000000000000000', rid
  if d then pt, ids = string.sub(d, 1, 16), string.sub(d, 17) .. rid end
  if #ids > %[2]d then ids, pt = string.sub(ids, %[3]d), fmt('%%016d', now) end
  d = pt .. ids
end
`, b.TTLMS, ResendIDLen*ResendIDs, ResendIDLen+1)
	if len(clears) > 0 {
		w(`if zs then
  local rest = {%[1]s, '1', t}
  for i = 1, #rest do zs[zo + i] = rest[i] end
  zo = zo + #rest
  if rid ~= '' then zs[zo + 1], zs[zo + 2], zo = 'd', d, zo + 2 end
  if sx < need then zs[zo + 1], zs[zo + 2] = 'x', fmt('%%d', need + %[2]d * 250) end
  redis.call('HSET', key, unpack(zs))
`, all, b.TTLMS)
		first = "elseif"
	}
	w(`%[4]s %[5]s then
  if rid ~= '' then
    redis.call('HSET', key, 'b', '0', 'g', v[5] or '0', '1', t, 'd', d, 'x', fmt('%%d', need + %[1]d * 250), %[2]s)
  else
    redis.call('HSET', key, 'b', '0', 'g', v[5] or '0', '1', t, 'x', fmt('%%d', need + %[1]d * 250), %[2]s)
  end
elseif rid ~= '' then
  if sx < need then
    redis.call('HSET', key, %[2]s, '1', t, 'd', d, 'x', fmt('%%d', need + %[1]d * 250))
  else
    redis.call('HSET', key, %[2]s, '1', t, 'd', d)
  end
elseif sx < need then
  redis.call('HSET', key, %[2]s, '1', t, 'x', fmt('%%d', need + %[1]d * 250))
else
  redis.call('HSET', key, %[2]s, '1', t)
end
if sx < need then redis.call('PEXPIRE', key, math.ceil((need + %[1]d * 250 - now) / 1000) + 1) end
return {1, now, cost, 0, 0, 1, now, tonumber(v[5]) or 0, %[3]s}
`, b.TTLMS, all, strings.Join(reply, ", "), first, fresh)
	return s.String()
}
