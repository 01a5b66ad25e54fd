package replica

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	bolt "go.etcd.io/bbolt"
)

// Paged mode (Config.PagedCache): a zone's view reads its names from the
// bbolt file, in a read transaction the queries share (readSnap, below),
// instead of holding them decoded in memory (zone.NewPaged). The file's
// memory map is the page cache: the kernel keeps the names queries ask for
// in memory as file-backed pages and drops the others when memory is
// short. The shared transaction is dropped before every write and lives
// at most snapRenew, so it never holds a remap of the growing file for
// long (initialMmap leaves room besides).

// errZoneGone: the zone a paged view reads is not in the file any more (it
// was deleted; the view is about to go too).
var errZoneGone = errors.New("zone not in storage")

// pagedStorage is where the paged view of zone origin reads.
func (r *Replica) pagedStorage(origin string) zone.Storage {
	return zone.Storage{
		Read: func() (zone.Pages, error) {
			p := pagesPool.Get().(*boltPages)
			if s := r.sharedSnap(); s != nil {
				if p.b = s.zone(origin); p.b == nil {
					s.release()
					p.end()
					return nil, errZoneGone
				}
				p.snap = s
				return p, nil
			}
			tx, err := r.db.Begin(false)
			if err != nil {
				p.end()
				return nil, err
			}
			if p.b = fsm.Generation(tx).Bucket(fsm.BucketZones).Bucket([]byte(origin)); p.b == nil {
				tx.Rollback()
				p.end()
				return nil, errZoneGone
			}
			p.tx = tx
			return p, nil
		},
		Decode: fsm.DecodeRRs,
	}
}

// boltPages is one zone's bucket in a read transaction, the shared one
// (snap) or the query's own (tx). One query uses it, from one goroutine;
// queries reuse them (pagesPool).
type boltPages struct {
	b    *bolt.Bucket
	c    *bolt.Cursor // b's, made on the first use
	snap *readSnap
	tx   *bolt.Tx
	key  [258]byte // room for a name's canonical key
}

var pagesPool = sync.Pool{New: func() any { return new(boltPages) }}

// cursor returns the query's cursor of the zone's bucket.
func (p *boltPages) cursor() *bolt.Cursor {
	if p.c == nil {
		p.c = p.b.Cursor()
	}
	return p.c
}

func (p *boltPages) Get(name []byte) []byte {
	key := dnsname.AppendCanonicalKey(p.key[:0], name)
	k, v := p.cursor().Seek(key)
	if !bytes.Equal(k, key) {
		return nil
	}
	return v
}

func (p *boltPages) Below(name []byte, skip func(desc []byte) bool) bool {
	key := dnsname.AppendCanonicalKey(p.key[:0], name)
	c := p.cursor()
	k, _ := c.Seek(key)
	if bytes.Equal(k, key) {
		k, _ = c.Next()
	}
	for ; k != nil && bytes.HasPrefix(k, key); k, _ = c.Next() {
		if skip == nil || !skip(dnsname.KeyName(k)) {
			return true
		}
	}
	return false
}

func (p *boltPages) End() {
	if p.snap != nil {
		p.snap.release()
	}
	if p.tx != nil {
		p.tx.Rollback()
	}
	p.end()
}

// end puts p back for another query.
func (p *boltPages) end() {
	*p = boltPages{}
	pagesPool.Put(p)
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
			z.NotePolicy(string(dnsname.KeyName(k)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	z.SetCounts(records, names)
	return z, nil
}

// A paged member's queries share one read transaction of the file's
// current state (readSnap) instead of each beginning one: beginning a
// transaction and opening a zone's bucket under the generation's cost more
// than the lookups themselves. etcd's backend shares a read-only bbolt
// transaction among concurrent readers the same way: such a
// transaction's buckets only read the memory map (no node cache, no dirty
// pages), and this one's buckets are opened under a lock. The Ready loop
// drops the shared transaction before it writes (a commit that grows the
// file remaps it, which waits for every reader) and begins the next once
// the write is applied, before the member's applied index moves: a query
// that waited for an index reads a state that holds it. Meanwhile queries
// begin transactions of their own. Writes from elsewhere (a snapshot
// received) are not held up long either: the shared transaction is begun
// anew at least every snapRenew.

// snapRenew bounds the age of the shared read transaction.
const snapRenew = 100 * time.Millisecond

// readSnap is the read transaction paged queries share.
type readSnap struct {
	tx    *bolt.Tx
	at    time.Time
	refs  atomic.Int64 // the Replica's reference and the queries'; 0: rolled back
	mu    sync.Mutex   // opens buckets: a transaction's bucket cache is not safe for concurrent use
	zones sync.Map     // origin → *bolt.Bucket (nil when the zone is not in it)
}

// acquire takes a reference to s, unless it is rolled back already.
func (s *readSnap) acquire() bool {
	for {
		n := s.refs.Load()
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a reference; the last rolls the transaction back.
func (s *readSnap) release() {
	if s.refs.Add(-1) == 0 {
		s.tx.Rollback()
	}
}

// zone returns the bucket of zone origin in s, nil when there is none.
func (s *readSnap) zone(origin string) *bolt.Bucket {
	if b, ok := s.zones.Load(origin); ok {
		return b.(*bolt.Bucket)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.zones.Load(origin); ok {
		return b.(*bolt.Bucket)
	}
	b := fsm.Generation(s.tx).Bucket(fsm.BucketZones).Bucket([]byte(origin))
	s.zones.Store(origin, b)
	return b
}

// sharedSnap returns the shared read transaction, with a reference the
// caller releases, or nil when there is none now.
func (r *Replica) sharedSnap() *readSnap {
	for range 3 {
		s := r.snap.Load()
		if s == nil {
			return nil
		}
		if s.acquire() {
			return s
		}
	}
	return nil
}

// dropSnap releases the shared read transaction; queries begin their own
// until renewSnap.
func (r *Replica) dropSnap() { r.replaceSnap(false) }

// renewSnap begins the shared read transaction anew, of the file's
// current state. The old one is released first: a writer waiting to remap
// the file goes before the new one begins.
func (r *Replica) renewSnap() { r.replaceSnap(true) }

// replaceSnap releases the shared read transaction and, with renew,
// begins the next.
func (r *Replica) replaceSnap(renew bool) {
	if r.cfg.PagedCache <= 0 {
		return
	}
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	if s := r.snap.Swap(nil); s != nil {
		s.release()
	}
	if !renew {
		return
	}
	tx, err := r.db.Begin(false)
	if err != nil {
		return // queries begin their own, and fail alike
	}
	s := &readSnap{tx: tx, at: time.Now()}
	s.refs.Store(1)
	r.snap.Store(s)
}

// renewSnaps renews the shared read transaction when it is older than
// snapRenew, until the member stops.
func (r *Replica) renewSnaps() {
	defer close(r.snapDone)
	t := time.NewTicker(snapRenew / 2)
	defer t.Stop()
	for {
		select {
		case <-r.stopc:
			return
		case <-t.C:
			if s := r.snap.Load(); s == nil || time.Since(s.at) >= snapRenew {
				r.renewSnap()
			}
		}
	}
}
