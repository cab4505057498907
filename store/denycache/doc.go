// Package denycache is a local cache of a store's denials (see Cache): a
// client that keeps knocking after a 429 costs a map lookup, not a round
// trip. Most programs build it with store.NewDenyCache.
package denycache
