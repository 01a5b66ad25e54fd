package replica

import (
	"bytes"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/namefilter"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	bolt "go.etcd.io/bbolt"
)

// NameFilter returns the existence filter (internal/namefilter) of the
// names zone origin holds on this member, with seed: every name holding
// records, every empty non-terminal above one, and every name a
// transaction part prepared here may add or delete (a router that skipped
// this shard for such a name would miss the hold that keeps the
// transaction's outcome atomic). It reads one consistent state of the
// file, in either memory mode, holding no more than the filter and one
// name; the filter's Index and Epoch are that state's applied index and
// shard map epoch (0 without a map).
func (r *Replica) NameFilter(origin string, seed uint64) (*namefilter.Filter, error) {
	var f *namefilter.Filter
	err := r.db.View(func(tx *bolt.Tx) error {
		g := fsm.Generation(tx)
		zb := g.Bucket(fsm.BucketZones).Bucket([]byte(origin))
		if zb == nil {
			return Errorf(ErrNotFound, "zone %q not found", origin)
		}
		prepared, err := preparedNames(g, origin)
		if err != nil {
			return err
		}
		// The names first (a count, without hashing), for the size.
		names := len(prepared)
		var prev []byte
		c := zb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				names += bytes.Count(k[namefilter.SharedPrefix(prev, k):], []byte{0})
				prev = k
			}
		}
		f = namefilter.New(names, seed)
		prev = nil
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				f.AddKeys(k, namefilter.SharedPrefix(prev, k))
				prev = k
			}
		}
		for _, name := range prepared {
			f.AddKey(dnsname.CanonicalKey(name))
		}
		f.Index, _ = fsm.Applied(g)
		m, err := fsm.ShardMap(g)
		if err != nil {
			return err
		}
		if m != nil {
			f.Epoch = m.Epoch
		}
		return nil
	})
	return f, err
}

// preparedNames returns the names the transaction parts prepared in g
// touch in zone origin.
func preparedNames(g *bolt.Bucket, origin string) ([]string, error) {
	p := g.Bucket(fsm.BucketTxPrepared)
	if p == nil {
		return nil, nil
	}
	var out []string
	err := p.ForEach(func(id, _ []byte) error {
		c, err := fsm.PreparedPart(g, id)
		if err != nil || c == nil || c.Zone != origin {
			return err
		}
		part, err := fsm.Unmarshal(c.Part)
		if err != nil {
			return err
		}
		names, err := fsm.Touched(part)
		out = append(out, names...)
		return err
	})
	return out, err
}
