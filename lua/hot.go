package lua

import (
	"fmt"
	"strings"
)

// hot writes the common path of a baked fast script: Lua written for one
// policy, every parameter a literal, one block per limit and no table but
// the HMGET reply, the fields it writes and its own reply. It answers a
// call that every limit admits at cost 1 or more, on a key with no running
// penalty, no resend of this call, a clock that did not step back and, on a
// sliding window, a last charge in the current or previous sub-bucket or
// before the whole window; it reads and writes exactly what fast.lua does
// then and replies the same. Every other call (a denial, a peek at cost 0,
// a cost above a capacity, a sub-bucket gap, a penalty, a resend, another
// type at the key) goes to general (fast.lua) with the time and the HMGET
// reply already read, before anything is written. A policy with a log
// (SlidingLog, or a small SlidingWindow kept exactly) goes to general at
// once.
//
// Numbers are written as fast.lua writes them: field names as Lua numbers
// (small integers, which Redis turns into the same digits), values through
// string.format('%d'), and every product or quotient as a Lua expression,
// so the doubles are those counters.lua computes.
func hot(b Baked) string {
	var s strings.Builder
	nl := len(b.P) / 7
	for i := 0; i < nl; i++ {
		if b.P[7*i] == 1 { // a log: general only
			return "return general()\n"
		}
	}
	minCap := int64(-1)
	for i := 0; i < nl; i++ {
		if c := b.P[7*i+1]; minCap < 0 || c < minCap {
			minCap = c
		}
	}
	w := func(format string, a ...any) { fmt.Fprintf(&s, format, a...) }
	w(`local now = tonumber(ARGV[1])
if now == 0 then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
end
local cost, rid, key = tonumber(ARGV[2]), ARGV[3], KEYS[1]
if cost < 1 or cost > %d then return general(now) end
local floor, fmt = math.floor, string.format
`, minCap)
	// The fields, in fields()'s order: field numbers, or the Lua
	// expressions of a sub-bucket ring's current and next sub-bucket.
	fields := []string{"1", "'b'", "'x'", "'d'", "'g'"}
	at := make([]int, nl) // where limit i's fields start in the reply, 1-based
	for i := 0; i < nl; i++ {
		kind, width, n, off := b.P[7*i], b.P[7*i+2], b.P[7*i+3], b.P[7*i+5]
		at[i] = len(fields) + 1
		switch kind {
		case 0:
			w("local k%d = floor(now / %d)\n", i, width)
			w("local a%d, b%d = %d + k%d %% %d, %d + (k%d + 1) %% %d\n", i, i, off+1, i, n+1, off+1, i, n+1)
			fields = append(fields, fmt.Sprint(off), fmt.Sprintf("a%d", i), fmt.Sprintf("a%d + %d", i, n+1),
				fmt.Sprintf("b%d", i), fmt.Sprintf("b%d + %d", i, n+1))
		case 2:
			w("local k%d = floor(now / %d)\n", i, width)
			fields = append(fields, fmt.Sprint(off), fmt.Sprint(off+1))
		case 3:
			fields = append(fields, fmt.Sprint(off))
		default:
			w("local k%d = floor(now / %d)\n", i, width)
			fields = append(fields, fmt.Sprint(off), fmt.Sprint(off+1), fmt.Sprint(off+2))
		}
	}
	w("local v = redis.pcall('HMGET', key, %s)\n", strings.Join(fields, ", "))
	w(`if v.err then return general(now, v) end
local s1, sb, sx, d = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, v[4]
if s1 > now or sb > now or (rid ~= '' and d and string.find(d, rid, 1, true)) then return general(now, v) end
local out = {1, now, cost, 0, 0, 1, now, tonumber(v[5]) or 0`)
	for i := 0; i < nl; i++ {
		w(", 0, 0, 0, 0")
	}
	w("}\nlocal wr, wo = {}, 0\n")
	for i := 0; i < nl; i++ {
		kind, capacity, width, n, period, off := b.P[7*i], b.P[7*i+1], b.P[7*i+2], b.P[7*i+3], b.P[7*i+4], b.P[7*i+5]
		m, p := at[i], 9+4*i
		w("do\n")
		switch kind {
		case 0: // sub-bucket ring (store/algorithm.go's buckets)
			w(`  local h = floor(s1 / %[1]d)
  local u, tot, cur, clear = 0, 0, 0, false
  if k%[2]d - h <= 1 then
    tot, cur = tonumber(v[%[3]d]) or 0, tonumber(v[%[4]d]) or 0
    if k%[2]d > h then tot, cur = tot - cur, 0 end
    u = tot
    local e = tonumber(v[%[5]d]) or 0
    if e ~= 0 and (tonumber(v[%[6]d]) or 0) <= now - k%[2]d * %[1]d then u = u - e end
  elseif k%[2]d - h < %[7]d then
    return general(now, v)
  else
    clear = s1 ~= 0
  end
  if u + cost > %[8]d then return general(now, v) end
  out[%[9]d], out[%[10]d] = %[8]d - u - cost, %[11]d
  if clear then
    local e = tonumber(v[%[5]d]) or 0
    for q = k%[2]d - %[12]d, k%[2]d - 1 do
      local x = %[13]d + q %% %[7]d
      if x ~= b%[2]d or e ~= 0 then
        wr[wo + 1], wr[wo + 2], wr[wo + 3], wr[wo + 4], wo = x, 0, x + %[7]d, 0, wo + 4
      end
    end
  end
  wr[wo + 1], wr[wo + 2], wr[wo + 3], wr[wo + 4], wo = a%[2]d, fmt('%%d', cur + cost), a%[2]d + %[7]d, fmt('%%d', now - k%[2]d * %[1]d), wo + 4
  wr[wo + 1], wr[wo + 2], wo = %[14]d, fmt('%%d', tot + cost), wo + 2
`, width, i, m, m+1, m+3, m+4, n+1, capacity, p, p+1, period, n, off+1, off)
		case 2: // fixed window
			w(`  local u = 0
  if (tonumber(v[%[1]d]) or 0) == k%[2]d then u = tonumber(v[%[3]d]) or 0 end
  if u + cost > %[4]d then return general(now, v) end
  out[%[5]d] = %[4]d - u - cost
  if u + cost > 0 then out[%[6]d] = (k%[2]d + 1) * %[7]d - now end
  wr[wo + 1], wr[wo + 2], wr[wo + 3], wr[wo + 4], wo = %[8]d, fmt('%%d', k%[2]d), %[9]d, fmt('%%d', u + cost), wo + 4
`, m, i, m+1, capacity, p, p+1, width, off, off+1)
		case 3: // token bucket (GCRA): the theoretical arrival time
			w(`  local u = tonumber(v[%[1]d]) or 0
  if u < now then u = now end
  if u + cost * %[2]d - now > %[3]d * %[2]d then return general(now, v) end
  local tat = u + cost * %[2]d
  local x, rem = %[3]d * %[2]d - (tat - now), 0
  if x > 0 then rem = floor(x / %[2]d) end
  out[%[4]d], out[%[5]d], out[%[6]d] = rem, tat - now, tat
  wr[wo + 1], wr[wo + 2], wo = %[7]d, fmt('%%d', tat), wo + 2
`, m, width, capacity, p, p+1, p+3, off)
		default: // two windows weighted (CounterApprox)
			w(`  local win, u, tot = tonumber(v[%[1]d]) or 0, 0, 0
  if win == k%[2]d then
    u, tot = tonumber(v[%[3]d]) or 0, tonumber(v[%[4]d]) or 0
  elseif win == k%[2]d - 1 then
    tot = tonumber(v[%[3]d]) or 0
  end
  local e = now - k%[2]d * %[5]d
  local a = floor((%[6]d - u) - tot * (%[5]d - e) / %[5]d)
  if a < 0 then a = 0 end
  if cost > a then return general(now, v) end
  out[%[7]d] = a - cost
  if u + cost > 0 then
    out[%[8]d] = (k%[2]d + 2) * %[5]d - now
  elseif tot > 0 then
    out[%[8]d] = (k%[2]d + 1) * %[5]d - now
  end
  wr[wo + 1], wr[wo + 2], wr[wo + 3], wr[wo + 4], wo = %[9]d, fmt('%%d', k%[2]d), %[10]d, fmt('%%d', u + cost), wo + 4
  wr[wo + 1], wr[wo + 2], wo = %[11]d, fmt('%%d', tot), wo + 2
`, m, i, m+1, m+2, width, capacity, p, p+1, off, off+1, off+2)
		}
		w("end\n")
	}
	w(`wr[wo + 1], wr[wo + 2], wo = 1, fmt('%%d', now), wo + 2
if rid ~= '' then
  d = (d or '') .. rid
  if #d > 32 then d = string.sub(d, #d - 31) end
  wr[wo + 1], wr[wo + 2], wo = 'd', d, wo + 2
end
local need = now + %[1]d * 1000
if sx < need then
  wr[wo + 1], wr[wo + 2] = 'x', fmt('%%d', need + %[1]d * 250)
  redis.call('HSET', key, unpack(wr))
  redis.call('PEXPIRE', key, math.ceil((need + %[1]d * 250 - now) / 1000) + 1)
else
  redis.call('HSET', key, unpack(wr))
end
return out
`, b.TTLMS)
	return s.String()
}
