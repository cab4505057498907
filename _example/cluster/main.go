// Command cluster builds the store on a Redis Sentinel and on a Redis
// Cluster, as the README's "Redis Cluster and Sentinel" shows. It does not
// need them running: building a client or a store dials nothing; the first
// request does. With them running, Ping says so.
//
//	go run -C _example ./cluster
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	addrs := []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}
	for name, client := range map[string]redis.UniversalClient{
		// Sentinel: a *redis.Client from NewFailoverClient.
		"sentinel": redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster",
			SentinelAddrs: []string{":26379"}, ContextTimeoutEnabled: true}),
		// Cluster:
		"cluster": redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}),
	} {
		st, err := store.NewRedis(client)
		if err != nil {
			log.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := st.Ping(ctx)
		cancel()
		if err != nil {
			fmt.Printf("%s: store built; not answering here: %v\n", name, err)
		} else {
			fmt.Printf("%s: %s\n", name, info)
		}
		client.Close()
	}
}
