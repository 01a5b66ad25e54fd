package fsm

import (
	"encoding/json"

	"github.com/craftdns/craftdns/internal/shardmap"

	bolt "go.etcd.io/bbolt"
)

// The deployment's shard map (internal/shardmap), as this shard knows it:
// every shard holds the same map at each epoch, since a new epoch is a
// transaction with a part on every shard of the old and the new map
// (OpMapSet, prepared and committed like any part: txn.go). It lives in
// bucketShardMap below the generation, so snapshots carry it.
var (
	bucketShardMap = []byte("shardmap")
	keyShardMap    = []byte("current")
)

// MapLock is the name a prepared map part holds, in zone "": no query's
// name, so readers never meet it, and a second map change waits for the
// first.
const MapLock = "shard map"

// maxMapBytes bounds a map in a command (shardmap bounds its shards and
// members; this bounds their strings).
const maxMapBytes = 1 << 20

// ShardMap returns the shard map in g, nil before the first.
func ShardMap(g *bolt.Bucket) (*shardmap.Map, error) {
	b := g.Bucket(bucketShardMap)
	if b == nil {
		return nil, nil
	}
	v := b.Get(keyShardMap)
	if v == nil {
		return nil, nil
	}
	m := new(shardmap.Map)
	if err := json.Unmarshal(v, m); err != nil {
		return nil, err
	}
	return m, nil
}

// applyMapSet checks, and unless o.dry writes, the map c carries: a valid
// map at the epoch after the one in g (1 when g has none), so that a
// change made from an old map is refused and nothing goes back.
func applyMapSet(g *bolt.Bucket, c *Command, o applyOpts) (Result, *Effect, error) {
	if len(c.Map) > maxMapBytes {
		return Result{}, nil, Errorf(ErrInvalid, "shard map of %d bytes: at most %d", len(c.Map), maxMapBytes)
	}
	m := new(shardmap.Map)
	if err := json.Unmarshal(c.Map, m); err != nil {
		return Result{}, nil, Errorf(ErrInvalid, "shard map: %v", err)
	}
	if err := m.Validate(); err != nil {
		return Result{}, nil, Errorf(ErrInvalid, "shard map: %v", err)
	}
	cur, err := ShardMap(g)
	if err != nil {
		return Result{}, nil, err
	}
	var epoch uint64
	if cur != nil {
		epoch = cur.Epoch
	}
	if m.Epoch != epoch+1 {
		return Result{}, nil, Errorf(ErrConflict, "shard map epoch %d: this shard is at epoch %d, a change must make epoch %d", m.Epoch, epoch, epoch+1)
	}
	if o.dry {
		return Result{}, nil, nil
	}
	b, err := g.CreateBucketIfNotExists(bucketShardMap)
	if err != nil {
		return Result{}, nil, err
	}
	v, err := json.Marshal(m)
	if err != nil {
		return Result{}, nil, err
	}
	if err := b.Put(keyShardMap, v); err != nil {
		return Result{}, nil, err
	}
	return Result{}, &Effect{Map: m}, nil
}
