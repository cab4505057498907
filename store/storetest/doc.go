// Package storetest checks a ratelimit.Store by the rules the stores of
// this module keep, for writers of stores: call Run from a test with a
// Harness that makes the store under test, and it replays random traces
// of requests (several keys, costs above 1, peeks, partial grants,
// reservations, refunds, resets, request IDs, and policies of the same
// name whose rates change mid-trace) against the memory store, the
// executable reference, requiring the same decision at every step
// (Equivalence); checks each algorithm's guarantee over every window by
// brute force on the store's own admissions (Guarantees); and runs named
// scenarios that pin what audits found and what a change of rate keeps
// (Scenarios). Operations a store
// does not implement (the optional interfaces of package ratelimit) are
// left out of its traces.
//
// How many random traces each check replays per algorithm: Harness.Traces,
// else the environment variable RATELIMIT_TRACES, else 100 when
// RATELIMIT_FULL=1 (the module's CI sets it) and 10 without it, a quick
// run that still meets every kind of step. The scenarios' own rounds
// shrink alike without RATELIMIT_FULL=1.
package storetest
