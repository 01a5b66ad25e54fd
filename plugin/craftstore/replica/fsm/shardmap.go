package fsm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/craftdns/craftdns/internal/shardmap"

	bolt "go.etcd.io/bbolt"
)

// The deployment's shard map (internal/shardmap), as this shard knows it:
// every shard holds the same map at each epoch, since a new epoch is a
// transaction with a part on every shard of the old and the new map
// (OpMapSet, prepared and committed like any part: txn.go). It lives in
// bucketShardMap below the generation, so snapshots carry it.
// Beside the map it keeps the shard this one is in it (the part that set
// the map named it: only the router knows which shard it sent a part to),
// and the epoch since which names are placed as now (the last map whose
// placement differs from the one before: shardmap.Place).
var (
	bucketShardMap = []byte("shardmap")
	keyShardMap    = []byte("current")
	keyMapShard    = []byte("shard")
	keyMapPlaced   = []byte("placed")
	keyMapEpoch    = []byte("epoch")
	keyMapParts    = []byte("partitions")
	keyMapMoved    = []byte("moved")    // 8 bytes a partition: the epoch it last changed owner
	keyMapLastMove = []byte("lastmove") // the epoch a partition last changed owner
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

// Placement returns this shard's place in the map in g, nil before the
// first map.
func Placement(g *bolt.Bucket) (*shardmap.Place, error) {
	m, err := ShardMap(g)
	if m == nil || err != nil {
		return nil, err
	}
	b := g.Bucket(bucketShardMap)
	placed, _ := binary.Uvarint(b.Get(keyMapPlaced))
	if placed == 0 {
		placed = m.Epoch
	}
	return shardmap.NewPlace(m, string(b.Get(keyMapShard)), placed)
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
	switch {
	case m.Epoch == epoch+1:
	case m.Epoch > epoch && c.Shard != "" && !inMap(g, cur):
		// A shard that joins the map (a migration adds it) has no map,
		// or one it left: it takes the deployment's next epoch, from the
		// parts of the shards in the map, which hold it.
	default:
		return Result{}, nil, Errorf(ErrConflict, "shard map epoch %d: this shard is at epoch %d, a change must make epoch %d", m.Epoch, epoch, epoch+1)
	}
	for _, p := range c.Hold {
		if cur == nil || int(p) >= cur.Partitions || m.Partitions != cur.Partitions {
			return Result{}, nil, Errorf(ErrInvalid, "shard map epoch %d holds partition %d: a hold names a partition of the shard's map, whose partition count stays", m.Epoch, p)
		}
	}
	if c.Drop && (len(c.Hold) == 0 || m.Key == shardmap.KeyName && IndexedParts(g) == 0) {
		return Result{}, nil, Errorf(ErrInvalid, "shard map epoch %d drops the names of held partitions: it needs a hold, no moves, and in key mode %q the partition index", m.Epoch, shardmap.KeyName)
	}
	if len(c.Imports) > 0 && m.Key != shardmap.KeyZone {
		return Result{}, nil, Errorf(ErrInvalid, "shard map epoch %d commits staged zones: whole zones move in key mode %q only", m.Epoch, shardmap.KeyZone)
	}
	if c.Shard != "" && !slices.Contains(m.Names(), c.Shard) {
		return Result{}, nil, Errorf(ErrInvalid, "shard map epoch %d has no shard %q: a part is sent to a shard of the map", m.Epoch, c.Shard)
	}
	placed := m.Epoch
	if cur != nil && cur.SameShards(m) {
		old, err := Placement(g)
		if err != nil {
			return Result{}, nil, err
		}
		placed = old.Placed
	}
	if o.dry {
		return Result{}, nil, nil
	}
	if err := noteMoves(g, cur, m); err != nil {
		return Result{}, nil, err
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
	if err := b.Put(keyMapShard, []byte(c.Shard)); err != nil {
		return Result{}, nil, err
	}
	if err := b.Put(keyMapPlaced, binary.AppendUvarint(nil, placed)); err != nil {
		return Result{}, nil, err
	}
	if err := b.Put(keyMapEpoch, binary.AppendUvarint(nil, m.Epoch)); err != nil {
		return Result{}, nil, err
	}
	if err := b.Put(keyMapParts, binary.AppendUvarint(nil, uint64(m.Partitions))); err != nil {
		return Result{}, nil, err
	}
	want := 0 // the partition index (partindex.go): key mode "name" only
	if m.Key == shardmap.KeyName {
		want = m.Partitions
	}
	if IndexedParts(g) != want {
		if err := buildIndex(g, want); err != nil {
			return Result{}, nil, err
		}
	}
	p, err := shardmap.NewPlace(m, c.Shard, placed)
	if err != nil {
		return Result{}, nil, err
	}
	return Result{}, &Effect{Map: p}, nil
}

// inMap reports whether this shard is one of cur's shards (nil: no map).
func inMap(g *bolt.Bucket, cur *shardmap.Map) bool {
	if cur == nil {
		return false
	}
	name := string(g.Bucket(bucketShardMap).Get(keyMapShard))
	return name != "" && slices.Contains(cur.Names(), name)
}

// fencedOp reports whether op is a write a router places by the shard map:
// record changes, UPDATEs, transaction parts, zone imports and deletions.
// The steps that finish a transaction (decide, commit, abort) are never
// fenced: a decision taken stands whatever map its router had.
func fencedOp(op Op) bool {
	switch op {
	case OpChange, OpUpdate, OpTxPrepare, OpImportBegin, OpImportCommit, OpDeleteZone:
		return true
	}
	return false
}

// noteMoves records, for each partition that changes owner from cur to m,
// that it moved at m's epoch (keyMapMoved: 8 bytes a partition), and the
// epoch of the last move (keyMapLastMove); a new partition count starts
// them again.
func noteMoves(g *bolt.Bucket, cur, m *shardmap.Map) error {
	b, err := g.CreateBucketIfNotExists(bucketShardMap)
	if err != nil {
		return err
	}
	if cur == nil || cur.Partitions != m.Partitions {
		if err := b.Delete(keyMapMoved); err != nil {
			return err
		}
		return b.Put(keyMapLastMove, binary.AppendUvarint(nil, m.Epoch))
	}
	rc, err1 := cur.Ring()
	rm, err2 := m.Ring()
	if err1 != nil || err2 != nil {
		return errors.Join(err1, err2)
	}
	var moved []byte
	for p := range m.Partitions {
		if rc.Owner(p) == rm.Owner(p) {
			continue
		}
		if moved == nil {
			moved = make([]byte, 8*m.Partitions)
			copy(moved, b.Get(keyMapMoved))
		}
		binary.BigEndian.PutUint64(moved[8*p:], m.Epoch)
	}
	if moved == nil {
		return nil
	}
	if err := b.Put(keyMapMoved, moved); err != nil {
		return err
	}
	return b.Put(keyMapLastMove, binary.AppendUvarint(nil, m.Epoch))
}

// checkEpoch refuses, with ErrStaleMap, write c that a router routed by
// the map at epoch when the shards changed since (shardmap.Place's
// FenceWrite), or when the partition of one of its names moved since: it
// would land on a shard that no longer owns it. When its names do not say
// (fenceNames: an import or a deletion of a whole zone, key mode "zone")
// any move since refuses it. It reads a few numbers, not the map, and the
// names only of a write routed by an older epoch: every write pays it.
func checkEpoch(g *bolt.Bucket, epoch uint64, c *Command) error {
	b := g.Bucket(bucketShardMap)
	if b == nil {
		return nil
	}
	cur, _ := binary.Uvarint(b.Get(keyMapEpoch))
	if epoch >= cur {
		return nil
	}
	placed, _ := binary.Uvarint(b.Get(keyMapPlaced))
	stale := epoch < placed
	var (
		names []string
		all   bool
	)
	if !stale {
		names, all = fenceNames(g, c)
	}
	if !stale && all {
		last, _ := binary.Uvarint(b.Get(keyMapLastMove))
		stale = epoch < last
	}
	if moved := b.Get(keyMapMoved); !stale && !all && moved != nil {
		parts := len(moved) / 8
		for _, n := range names {
			if p := shardmap.PartitionOf(n, parts); binary.BigEndian.Uint64(moved[8*p:]) > epoch {
				stale = true
				break
			}
		}
	}
	if !stale {
		return nil
	}
	return Errorf(ErrStaleMap, "stale shard map: routed by epoch %d, names are placed otherwise since (this shard is at epoch %d); read the map at %s on any member", epoch, cur, shardmap.MapPath)
}

// fenceNames returns the names write c touches, for checkEpoch:
// all is set when its names do not say where it lands (an import or a
// deletion of a whole zone, a zone's write in key mode "zone", or a part
// that cannot be read).
func fenceNames(g *bolt.Bucket, c *Command) (names []string, all bool) {
	if b := g.Bucket(bucketShardMap); b == nil || b.Get(keyMapMoved) == nil || IndexedParts(g) == 0 {
		return nil, true // no partition moved yet, or key mode "zone"
	}
	part := c
	if c.Op == OpTxPrepare {
		p, err := Unmarshal(c.Part)
		if err != nil {
			return nil, true
		}
		part = p
	}
	switch part.Op {
	case OpChange, OpUpdate:
		names, err := Touched(part)
		return names, err != nil
	}
	return nil, true
}

// checkMigrating refuses, with ErrConflict, a routed import or deletion of
// a whole zone while the map moves partitions between shards (a
// migration): those write every shard as the router splits the zone, and
// the split changes under them. They are taken again once it ends.
func checkMigrating(g *bolt.Bucket, op Op) error {
	if op != OpImportBegin && op != OpImportCommit && op != OpDeleteZone {
		return nil
	}
	m, err := ShardMap(g)
	if err != nil || m == nil || m.Migration == nil {
		return err
	}
	return Errorf(ErrConflict, "shard %q is being %s: zones are created, replaced and deleted once that ends (GET /v1/shards on a router shows its progress)", m.Migration.Shard.Name, map[string]string{shardmap.MigrateAdd: "added", shardmap.MigrateRemove: "removed"}[m.Migration.Kind])
}

// holdName is the lock name of partition p held by a map part (Hold): in
// zone "", like MapLock, so that no query meets it.
func holdName(p uint32) string { return "partition " + strconv.FormatUint(uint64(p), 10) }

// checkHolds refuses with ErrBusy a write of names one of which is in a
// partition that a prepared map part holds (a migration's critical
// section): the writer waits and tries again (the replica's
// proposeUnlocked, the routers' retries of a busy part), so that the write
// is held, not refused, and lands on the partition's owner after the map
// change.
func checkHolds(g *bolt.Bucket, zone string, names []string) error {
	b := g.Bucket(bucketShardMap)
	locks := g.Bucket(BucketTxLocks)
	if b == nil || locks == nil {
		return nil
	}
	parts, _ := binary.Uvarint(b.Get(keyMapParts))
	if parts == 0 {
		// A map set before the count was kept beside it.
		m, err := ShardMap(g)
		if err != nil || m == nil {
			return err
		}
		parts = uint64(m.Partitions)
	}
	if IndexedParts(g) == 0 {
		names = []string{zone} // key mode "zone": the zone's partition holds it
	}
	for _, n := range names {
		p := uint32(shardmap.PartitionOf(n, int(parts)))
		if by := locks.Get(lockKey("", holdName(p))); by != nil {
			return Errorf(ErrBusy, "%s is in partition %d, which a shard map change in progress (transaction %x) holds", n, p, by)
		}
	}
	return nil
}
