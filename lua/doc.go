// Package lua holds the Redis store's script, embedded: the files of
// this folder joined into one source (Source), which store/redis loads
// with the numbers of internal/layout before it. script.lua, its
// opening, says what the script does and what each operation takes and
// replies; the others follow in the order Source joins them: lean.lua
// (the frame of the lean path of the common call), reset.lua, resend.lua
// (resend IDs), policy.lua (the policy, places in line), one file for each
// algorithm's own arithmetic and steps (evaluate, report, refill, charge,
// and but for a Concurrent limit the lean path's leanfields and bind),
// named as store/memory's files are (log.lua, token.lua, approx.lua,
// concurrent.lua, sliding.lua, fixed.lua), counters.lua (the steps by
// kind, places in line, folds and retimes), refund.lua, slots.lua (releasing and
// renewing slots), frame.lua (a key's read, expiry and reply in a take),
// denial.lua (a denial kept in its key for the calls that repeat it) and
// take.lua.
//
// The script mirrors the memory store (store/memory), the reference; the
// conformance suite (store/storetest) holds the two to identical answers.
package lua
