package redis

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// runBatched runs one key's script on a Cluster or a Ring through the
// batcher of node, the node that serves the key (WithBatching), or alone
// when batching is off or the node is not known (nil). A Cluster master
// that answers that the slot moved (MOVED, ASK: the script did not run)
// has the call sent again through the Cluster client, which follows the
// redirection and learns the new layout.
func (r *Store) runBatched(ctx context.Context, node *goredis.Client, script *script, keys []string, args []any) ([]int64, error) {
	if b := r.nodeBatcher(node); b != nil {
		reply, err := b.do(ctx, script, keys, args)
		if err == nil || !redirected(err) {
			return reply, err
		}
	}
	return runScript(ctx, r.client, script, keys, args).Int64Slice()
}

// nodeOf returns the node that serves key: a Cluster's master, a Ring's
// shard; nil for another client, or a node not known.
func (r *Store) nodeOf(ctx context.Context, key string) *goredis.Client {
	var node *goredis.Client
	var err error
	switch c := r.client.(type) {
	case *goredis.ClusterClient:
		node, err = c.MasterForKey(ctx, key)
	case *goredis.Ring:
		node, err = c.GetShardClientForKey(key)
	}
	if err != nil {
		return nil
	}
	return node
}

// nodeBatcher returns node's batcher, made on first use on the node's own
// client, or nil when batching is off or node is nil.
func (r *Store) nodeBatcher(node *goredis.Client) *batcher {
	if r.nodeBatching <= 0 || node == nil {
		return nil
	}
	addr := node.Options().Addr
	if b, ok := r.nodeBatches.Load(addr); ok && b.(*batcher).client == node {
		return b.(*batcher)
	}
	// First use, or the node's client changed (a new Cluster layout). On a
	// Cluster every call stays its own command: a run's keys would span
	// slots.
	_, cluster := r.client.(*goredis.ClusterClient)
	b := &batcher{max: r.nodeBatching, client: node, single: cluster}
	r.nodeBatches.Store(addr, b)
	return b
}

// redirected reports a Cluster's answer that the key's slot is served
// elsewhere or moving: the call did not run.
func redirected(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ") || strings.HasPrefix(s, "TRYAGAIN")
}
