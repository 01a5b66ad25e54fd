package fsm

import (
	"bytes"
	"encoding/binary"
	"sort"

	"github.com/craftdns/craftdns/internal/xfrstream"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// Cut records let a router in key mode "name" answer IXFR incrementally
// (internal/xfrstream, "Cuts"). Every transfer a router serves is read from
// one cut through the shards (a fence held on each), presented with one
// zone serial; when it removes the fences it has every shard record which
// state of every shard that serial stands for:
//
//	data.<n>/xfrcuts/<zone> 0 <zone serial (4 bytes)> -> sequence (8) | the cut (JSON)
//
// The newest MaxCuts per zone are kept; the journal's reset (an import, a
// deletion) drops them with it.
var bucketXfrCuts = []byte("xfrcuts")

// MaxCuts is how many cut records a zone keeps.
const MaxCuts = 100

func cutKey(zone string, serial uint32) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(zone), 0), serial)
}

// putCut records cut (JSON) as zone serial's, dropping the oldest beyond
// MaxCuts.
func putCut(g *bolt.Bucket, zone string, serial uint32, cut []byte) error {
	b, err := g.CreateBucketIfNotExists(bucketXfrCuts)
	if err != nil {
		return err
	}
	prefix := append([]byte(zone), 0)
	var oldest []byte
	var oldestSeq, lastSeq uint64
	n := 0
	cur := b.Cursor()
	for k, v := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
		if len(v) < 8 {
			continue
		}
		seq := binary.BigEndian.Uint64(v)
		n++
		lastSeq = max(lastSeq, seq)
		if oldest == nil || seq < oldestSeq {
			oldest, oldestSeq = append([]byte(nil), k...), seq
		}
	}
	if n >= MaxCuts && oldest != nil {
		if err := b.Delete(oldest); err != nil {
			return err
		}
	}
	v := binary.BigEndian.AppendUint64(nil, lastSeq+1)
	return b.Put(cutKey(zone, serial), append(v, cut...))
}

// Cut returns the cut recorded for zone serial, nil if none is.
func Cut(g *bolt.Bucket, zone string, serial uint32) []byte {
	b := g.Bucket(bucketXfrCuts)
	if b == nil {
		return nil
	}
	v := b.Get(cutKey(zone, serial))
	if len(v) < 8 {
		return nil
	}
	return append([]byte(nil), v[8:]...)
}

// dropCuts forgets the cuts of zone.
func dropCuts(g *bolt.Bucket, zone string) error {
	b := g.Bucket(bucketXfrCuts)
	if b == nil {
		return nil
	}
	prefix := append([]byte(zone), 0)
	var keys [][]byte
	cur := b.Cursor()
	for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// netChanges folds the journal's changes of zone from serial to soa's into
// one difference: the RRs of the copy at serial that are gone (removed) and
// those that are new (added), SOAs aside, each in canonical order of owner
// names. ok is false when the journal does not reach back to serial. old is
// the SOA the copy at serial has.
func netChanges(g *bolt.Bucket, origin string, serial uint32, soa *dns.SOA) (old *dns.SOA, removed, added []dns.RR, ok bool, err error) {
	gone := map[string]dns.RR{}
	fresh := map[string]dns.RR{}
	ok, err = journalChanges(g, origin, serial, soa.Serial, func(rem, add []dns.RR) error {
		for _, rr := range rem {
			if s, isSOA := rr.(*dns.SOA); isSOA {
				if old == nil {
					old = s
				}
				continue
			}
			k := xfrstream.Text(rr)
			if _, ok := fresh[k]; ok {
				delete(fresh, k)
			} else {
				gone[k] = rr
			}
		}
		for _, rr := range add {
			if _, isSOA := rr.(*dns.SOA); isSOA {
				continue
			}
			k := xfrstream.Text(rr)
			if _, ok := gone[k]; ok {
				delete(gone, k)
			} else {
				fresh[k] = rr
			}
		}
		return nil
	})
	if !ok || err != nil || old == nil {
		return nil, nil, nil, false, err
	}
	return old, sortedRRs(gone), sortedRRs(fresh), true, nil
}

// sortedRRs returns the RRs of m in the order of xfrstream.Less, which a
// router merges the shards' differences in.
func sortedRRs(m map[string]dns.RR) []dns.RR {
	out := make([]dns.RR, 0, len(m))
	for _, rr := range m {
		out = append(out, rr)
	}
	sort.Slice(out, func(i, j int) bool { return xfrstream.Less(out[i], out[j]) })
	return out
}
