package fsm

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// The partition index: in key mode "name" (a map whose names are placed
// by their own hash) every stored name is listed under its partition, so
// that the names a migration moves are read, and dropped, without a scan
// of the zones:
//
//	data.<n>/partindex/<partition, 4 bytes> <origin> 0 <name key> -> empty
//	data.<n>/shardmap/indexed -> the partition count the index is for
//
// The first map of key mode "name" (and one with another partition count)
// builds it from the zones; from then on every write of a name keeps it.
var (
	bucketPartIndex = []byte("partindex")
	keyMapIndexed   = []byte("indexed")
)

// IndexedParts returns the partition count of the index, 0 when there is
// none.
func IndexedParts(g *bolt.Bucket) int {
	b := g.Bucket(bucketShardMap)
	if b == nil {
		return 0
	}
	n, _ := binary.Uvarint(b.Get(keyMapIndexed))
	return int(n)
}

// partKey is the index key of name (canonical) of zone origin in
// partition p.
func partKey(p int, origin, name string) []byte {
	k := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(origin)+1+len(name)+1), uint32(p))
	k = append(append(k, origin...), 0)
	return append(k, nameKey(name)...)
}

// nameOfKey is the name a name key encodes (nameKey's inverse).
func nameOfKey(k []byte) string {
	if len(k) <= 1 {
		return "."
	}
	labels := bytes.Split(bytes.TrimSuffix(k, []byte{0}), []byte{0})
	var sb strings.Builder
	for i := len(labels) - 1; i >= 0; i-- {
		sb.Write(labels[i])
		sb.WriteByte('.')
	}
	return sb.String()
}

// indexName records that name of zone origin holds RRs (present) or
// none, when the index exists (parts > 0).
func indexName(g *bolt.Bucket, parts int, origin, name string, present bool) error {
	if parts == 0 {
		return nil
	}
	b, err := g.CreateBucketIfNotExists(bucketPartIndex)
	if err != nil {
		return err
	}
	name = dnsname.Lower(name)
	k := partKey(shardmap.PartitionOf(name, parts), origin, name)
	if present {
		return b.Put(k, nil)
	}
	return b.Delete(k)
}

// indexZone adds (present) or removes every name of zone bucket zb of
// zone origin to or from the index. The keys go in in their order: bbolt
// keeps what one transaction writes in its in-memory nodes, and a key put
// in the middle of a node moves the keys after it, so that a zone's
// hundreds of thousands of names put in hash order would cost the square.
func indexZone(g *bolt.Bucket, parts int, origin string, zb *bolt.Bucket, present bool) error {
	if parts == 0 || zb == nil {
		return nil
	}
	var keys [][]byte
	err := zb.ForEach(func(k, v []byte) error {
		if v != nil {
			name := nameOfKey(k)
			keys = append(keys, partKey(shardmap.PartitionOf(name, parts), origin, name))
		}
		return nil
	})
	if err != nil || len(keys) == 0 {
		return err
	}
	slices.SortFunc(keys, bytes.Compare)
	b, err := g.CreateBucketIfNotExists(bucketPartIndex)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if present {
			err = b.Put(k, nil)
		} else {
			err = b.Delete(k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// buildIndex makes the index for parts partitions from every zone, or
// drops it (parts 0).
func buildIndex(g *bolt.Bucket, parts int) error {
	if g.Bucket(bucketPartIndex) != nil {
		if err := g.DeleteBucket(bucketPartIndex); err != nil {
			return err
		}
	}
	b, err := g.CreateBucketIfNotExists(bucketShardMap)
	if err != nil {
		return err
	}
	if err := b.Put(keyMapIndexed, binary.AppendUvarint(nil, uint64(parts))); err != nil {
		return err
	}
	zones := g.Bucket(BucketZones)
	return zones.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		return indexZone(g, parts, string(k), zones.Bucket(k), true)
	})
}

// EachInPartitions calls fn with the zone and canonical name of every name
// indexed under one of partitions, partition by partition, each in zone
// and canonical order. ok is false when there is no index (key mode
// "zone", or before the first map).
func EachInPartitions(g *bolt.Bucket, partitions []uint32, fn func(origin, name string) error) (ok bool, err error) {
	if IndexedParts(g) == 0 {
		return false, nil
	}
	b := g.Bucket(bucketPartIndex)
	if b == nil {
		return true, nil
	}
	for _, p := range partitions {
		prefix := binary.BigEndian.AppendUint32(nil, p)
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			origin, key, found := bytes.Cut(k[4:], []byte{0})
			if !found {
				continue
			}
			if err := fn(string(origin), nameOfKey(key)); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// SharedRRs splits rrs, the RRs at canonical name of zone origin (bucket
// zb), into those every shard holds in key mode "name" (the apex RRsets,
// every RRset at or below a zone cut, every DNAME RRset: craftroute's
// split.go) and those only the name's partition's owner holds.
func SharedRRs(zb *bolt.Bucket, origin, name string, rrs []dns.RR) (shared, owned []dns.RR, err error) {
	if name == origin {
		return rrs, nil, nil
	}
	if cut, err := underCut(zb, origin, name, rrs); err != nil || cut {
		return rrs, nil, err
	}
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeDNAME {
			shared = append(shared, rr)
		} else {
			owned = append(owned, rr)
		}
	}
	return shared, owned, nil
}

// underCut reports whether a zone cut is at canonical name of zone origin
// (bucket zb), whose RRs are rrs, or above it, below the apex.
func underCut(zb *bolt.Bucket, origin, name string, rrs []dns.RR) (bool, error) {
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		n := name[off:]
		if len(n) <= len(origin) {
			break
		}
		at := rrs
		if off > 0 {
			var err error
			if at, err = RRsAt(zb, n); err != nil {
				return false, err
			}
		}
		if slices.ContainsFunc(at, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeNS }) {
			return true, nil
		}
	}
	return false, nil
}

// dropHeld returns the changes, one per zone, that delete the records of
// the names of partitions that only their owner holds (a map part's Drop:
// the shard hands them over), read from the index.
func dropHeld(g *bolt.Bucket, partitions []uint32) ([]*Command, error) {
	byZone := map[string]*Command{}
	var order []string
	zones := g.Bucket(BucketZones)
	ok, err := EachInPartitions(g, partitions, func(origin, name string) error {
		zb := zones.Bucket([]byte(origin))
		if zb == nil {
			return nil
		}
		rrs, err := RRsAt(zb, name)
		if err != nil {
			return err
		}
		_, owned, err := SharedRRs(zb, origin, name, rrs)
		if err != nil || len(owned) == 0 {
			return err
		}
		c := byZone[origin]
		if c == nil {
			c = &Command{Op: OpChange, Zone: origin}
			byZone[origin] = c
			order = append(order, origin)
		}
		for _, rr := range owned {
			c.Del = append(c.Del, Deletion{RR: rr})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, Errorf(ErrInvalid, "no partition index on this shard: a map part drops names of key mode %q only", shardmap.KeyName)
	}
	slices.Sort(order)
	out := make([]*Command, 0, len(order))
	for _, z := range order {
		out = append(out, byZone[z])
	}
	return out, nil
}
