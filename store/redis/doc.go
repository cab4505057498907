// Package redis is the Redis store: counters shared by every server that
// uses the same Redis (a single server, Sentinel, a Cluster or a Ring) and
// key prefix, each decision one script call on Redis's own clock.
//
// The script's source lives beside the Go code: script.lua (its opening),
// lean.lua (the lean path of the common call), reset.lua, counters.lua,
// refund.lua and take.lua, joined by script.go, which also gives it the
// names of internal/layout and, for the first policies a store sees, their
// numbers as data. The Go side: store.go (the Store and its calls, within
// their deadline), options.go, take.go (one call and its reply),
// cluster.go (a request across Cluster masters, with its refunds),
// refund.go (Refund and Reset), batch.go (calls sharing pipelines),
// pipeline.go, resend.go (a resent call charged once), nodecircuit.go (a
// circuit per Cluster master), keys.go, ping.go and diagnose.go (what an
// error says of its cause).
//
// Most programs build it with store.NewRedis.
package redis
