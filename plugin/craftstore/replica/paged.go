package replica

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	bolt "go.etcd.io/bbolt"
)

// Paged mode (Config.PagedCache): a zone's view reads its names from the
// bbolt file, each query in a read transaction of its own, instead of
// holding them decoded in memory (zone.NewPaged). The file's memory map is
// the page cache: the kernel keeps the names queries ask for in memory as
// file-backed pages and drops the others when memory is short. A read
// transaction lasts one query, so it never holds a remap of the growing
// file for long (InitialMmapSize leaves room besides).

// errZoneGone: the zone a paged view reads is not in the file any more (it
// was deleted; the view is about to go too).
var errZoneGone = errors.New("zone not in storage")

// pagedStorage is where the paged view of zone origin reads.
func (r *Replica) pagedStorage(origin string) zone.Storage {
	return zone.Storage{
		Read: func() (zone.Pages, func(), error) {
			tx, err := r.db.Begin(false)
			if err != nil {
				return nil, nil, err
			}
			b := fsm.Generation(tx).Bucket(fsm.BucketZones).Bucket([]byte(origin))
			if b == nil {
				tx.Rollback()
				return nil, nil, errZoneGone
			}
			return &boltPages{b: b}, func() { tx.Rollback() }, nil
		},
		Decode: fsm.DecodeRRs,
	}
}

// boltPages is one zone's bucket in a read transaction. One query uses it,
// from one goroutine.
type boltPages struct {
	b   *bolt.Bucket
	key [258]byte // room for a name's canonical key
}

func (p *boltPages) Get(name []byte) []byte {
	return p.b.Get(appendCanonicalKey(p.key[:0], name))
}

func (p *boltPages) Below(name []byte, skip func(desc []byte) bool) bool {
	key := appendCanonicalKey(p.key[:0], name)
	c := p.b.Cursor()
	k, _ := c.Seek(key)
	if bytes.Equal(k, key) {
		k, _ = c.Next()
	}
	for ; k != nil && bytes.HasPrefix(k, key); k, _ = c.Next() {
		if skip == nil || !skip(keyToName(k)) {
			return true
		}
	}
	return false
}

// appendCanonicalKey appends to dst the key of name (canonical: lower-case,
// fully qualified) as dnsname.CanonicalKey makes it: its labels from the
// root down, each followed by a zero byte ("." alone: one zero byte). A
// backslash escapes the byte after it (an escaped dot does not end a
// label), as dns.NextLabel reads names.
func appendCanonicalKey(dst, name []byte) []byte {
	if len(name) == 1 && name[0] == '.' {
		return append(dst, 0)
	}
	// The label ends, from the last label to the first.
	var ends [128]int // a name has at most 127 labels
	n := 0
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '\\':
			i++
		case '.':
			if n < len(ends) {
				ends[n] = i
				n++
			}
		}
	}
	for j := n - 1; j >= 0; j-- {
		from := 0
		if j > 0 {
			from = ends[j-1] + 1
		}
		dst = append(dst, name[from:ends[j]]...)
		dst = append(dst, 0)
	}
	return dst
}

// keyToName is the name (presentation form) of a canonical key.
func keyToName(k []byte) []byte {
	if len(k) == 1 && k[0] == 0 {
		return []byte(".")
	}
	out := make([]byte, 0, len(k))
	end := len(k) - 1 // the zero byte after the last label
	for end > 0 {
		start := bytes.LastIndexByte(k[:end], 0) + 1
		out = append(out, k[start:end]...)
		out = append(out, '.')
		end = start - 1
	}
	return out
}

// loadPaged makes the paged view of zone origin from generation g: it
// counts the zone's records, the names holding them and those holding
// request-routing policies, reading the stored records without decoding
// them.
func (r *Replica) loadPaged(g *bolt.Bucket, origin string) (*zone.Zone, error) {
	z := zone.NewPaged(origin, r.pagedStorage(origin), r.cfg.PagedCache)
	if base, ok := fsm.SerialBase(g, origin); ok {
		z.SetSerialBase(base)
	}
	records, names := 0, 0
	err := g.Bucket(fsm.BucketZones).Bucket([]byte(origin)).ForEach(func(k, v []byte) error {
		pol := false
		n, err := fsm.ScanRRs(v, func(t uint16) { pol = pol || t == policy.TypePolicy })
		if err != nil {
			return fmt.Errorf("zone %s: %w", origin, err)
		}
		if n > 0 {
			records += n
			names++
		}
		if pol {
			z.NotePolicy(string(keyToName(k)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	z.SetCounts(records, names)
	return z, nil
}
