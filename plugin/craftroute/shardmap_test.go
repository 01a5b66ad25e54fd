package craftroute

import (
	"cmp"
	"testing"

	"github.com/craftdns/craftdns/internal/shardmap"
)

// route makes shards c's routing, without a map, placed by the default
// ring.
func (c *Craftroute) route(t testing.TB, shards ...*Shard) {
	t.Helper()
	rt, err := newRouting(nil, shards, cmp.Or(c.cfg.key, keyName), shardmap.DefaultPartitions, shardmap.DefaultLoad)
	if err != nil {
		t.Fatal(err)
	}
	c.rt.Store(rt)
}
