// Package storetest checks a ratelimit.Store by the rules the stores of
// this module keep, for writers of stores: call Run from a test with a
// Harness that makes the store under test, and it replays random traces
// of requests (several keys, costs above 1, peeks, partial grants,
// reservations, refunds, resets, request IDs) against the memory store, the
// executable reference, requiring the same decision at every step
// (Equivalence); checks each algorithm's guarantee over every window by
// brute force on the store's own admissions (Guarantees); and runs named
// scenarios that pin what audits found (Scenarios). Operations a store
// does not implement (the optional interfaces of package ratelimit) are
// left out of its traces.
//
// How many random traces each check replays per algorithm: Harness.Traces,
// else the environment variable RATELIMIT_TRACES, else a number that keeps
// a run on the memory store well under a minute (100); the module's CI
// runs 1,000.
package storetest
