package replica

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// lockView is the member's in-memory view of the names that prepared
// transaction parts hold (txlocks in bbolt), for readers: a query about a
// name that a part can change waits until the part finished (package
// internal/txn, "Atomic visibility"). The zero value is ready to use.
type lockView struct {
	n       atomic.Int64 // names held; 0: the fast path of every query
	mu      sync.Mutex
	held    map[string]map[string]int // zone → name → parts holding it
	changed chan struct{}             // closed, and replaced, when a lock goes
	at      map[[16]byte]time.Time    // prepared parts → when this member applied them
	parts   map[[16]byte]partNames    // prepared parts → the names they hold
}

// partNames are the names one prepared part holds in its zone.
type partNames struct {
	zone  string
	names []string
}

// apply adds or removes the names of e in zone.
func (v *lockView) apply(zone string, e *fsm.TxEffect) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.held == nil {
		v.held = map[string]map[string]int{}
	}
	names := v.held[zone]
	if names == nil {
		names = map[string]int{}
		v.held[zone] = names
	}
	if v.at == nil {
		v.at = map[[16]byte]time.Time{}
	}
	if v.parts == nil {
		v.parts = map[[16]byte]partNames{}
	}
	if e.Prepared {
		v.at[e.ID] = time.Now()
		v.parts[e.ID] = partNames{zone: zone, names: e.Names}
	} else {
		delete(v.at, e.ID)
		delete(v.parts, e.ID)
	}
	for _, n := range e.Names {
		if e.Prepared {
			names[n]++
			v.n.Add(1)
			continue
		}
		if names[n] > 0 {
			names[n]--
			v.n.Add(-1)
			if names[n] == 0 {
				delete(names, n)
			}
		}
	}
	if len(names) == 0 {
		delete(v.held, zone)
	}
	if !e.Prepared {
		v.signal()
	}
}

// signal wakes the readers waiting for a lock to go.
func (v *lockView) signal() {
	if v.changed != nil {
		close(v.changed)
		v.changed = nil
	}
}

// wait returns a channel closed when a lock goes.
func (v *lockView) wait() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.changed == nil {
		v.changed = make(chan struct{})
	}
	return v.changed
}

// preparedBefore returns the prepared parts this member applied before t.
func (v *lockView) preparedBefore(t time.Time) map[[16]byte]time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[[16]byte]time.Time{}
	for id, at := range v.at {
		if at.Before(t) {
			out[id] = at
		}
	}
	return out
}

// replace sets the view to held and the prepared parts to parts (from
// bbolt: at start, after a snapshot; they count as prepared now).
func (v *lockView) replace(held map[string]map[string]int, parts map[[16]byte]partNames) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.at = map[[16]byte]time.Time{}
	for id := range parts {
		v.at[id] = time.Now()
	}
	v.parts = parts
	n := 0
	for _, names := range held {
		for _, c := range names {
			n += c
		}
	}
	v.held = held
	v.n.Store(int64(n))
	v.signal()
}

// holds reports whether a prepared part holds a name whose change can
// change the answer for qname in zone: qname itself, an ancestor of it
// (a delegation, a CNAME or the name's existence), a descendant (an empty
// non-terminal) or a wildcard at an ancestor. It returns a channel closed
// when a lock goes.
func (v *lockView) holds(zone, qname string) (bool, <-chan struct{}) {
	if v.n.Load() == 0 {
		return false, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for name := range v.held[zone] {
		if related(zone, name, qname) {
			if v.changed == nil {
				v.changed = make(chan struct{})
			}
			return true, v.changed
		}
	}
	return false, nil
}

// related reports whether a change at name can change the answer for
// qname in zone (all canonical): name is qname or an ancestor of it (a
// delegation, a CNAME, its existence), a descendant of it (qname may be an
// empty non-terminal; the apex always exists), or a wildcard that can
// synthesize qname.
func related(zone, name, qname string) bool {
	switch {
	case dns.IsSubDomain(name, qname):
		return true
	case dns.IsSubDomain(qname, name):
		return qname != zone
	}
	if parent, ok := strings.CutPrefix(name, "*."); ok {
		return dns.IsSubDomain(parent, qname) && parent != qname
	}
	return false
}

// loadLocks reads the lock view from the current generation.
func (r *Replica) loadLocks() error {
	held := map[string]map[string]int{}
	parts := map[[16]byte]partNames{}
	err := r.db.View(func(tx *bolt.Tx) error {
		if p := fsm.Generation(tx).Bucket(fsm.BucketTxPrepared); p != nil {
			p.ForEach(func(k, _ []byte) error {
				var id [16]byte
				copy(id[:], k)
				parts[id] = partNames{}
				return nil
			})
		}
		b := fsm.Generation(tx).Bucket(fsm.BucketTxLocks)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			zone, name, ok := strings.Cut(string(k), "\x00")
			if !ok {
				return nil
			}
			if held[zone] == nil {
				held[zone] = map[string]int{}
			}
			held[zone][name]++
			var id [16]byte
			if copy(id[:], v) == len(id) {
				p := parts[id]
				p.zone, p.names = zone, append(p.names, name)
				parts[id] = p
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	r.locks.replace(held, parts)
	return nil
}

// holders returns the prepared parts that hold a name whose change can
// change the answer for qname in zone (as holds), and a channel closed when
// a lock goes.
func (v *lockView) holders(zone, qname string) ([]txn.ID, <-chan struct{}) {
	if v.n.Load() == 0 {
		return nil, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var ids []txn.ID
	for id, p := range v.parts {
		if p.zone == zone && slices.ContainsFunc(p.names, func(name string) bool { return related(zone, name, qname) }) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if v.changed == nil {
		v.changed = make(chan struct{})
	}
	return ids, v.changed
}

// TxHolders returns the transactions whose prepared parts on this member
// hold a name that can change the answer for qname in zone (both
// canonical; TxWait waits for them), and a channel closed when one of their
// locks goes.
func (r *Replica) TxHolders(zone, qname string) ([]txn.ID, <-chan struct{}) {
	return r.locks.holders(zone, qname)
}

// TxDecided returns the decision this member's state records for
// transaction id, as its coordinator: the outcome, or "" when none was
// recorded. It reads the member's own state: call Fresh first for the
// group's.
func (r *Replica) TxDecided(id txn.ID) (txn.Outcome, error) {
	var o txn.Outcome
	err := r.db.View(func(tx *bolt.Tx) error {
		o, _ = fsm.Decided(fsm.Generation(tx), id[:])
		return nil
	})
	return o, err
}

// TxCoordinator returns the coordinator and participants (JSON, as the
// prepare carried them) of the part of transaction id prepared on this
// member.
func (r *Replica) TxCoordinator(id txn.ID) ([]byte, bool) {
	var meta []byte
	r.db.View(func(tx *bolt.Tx) error {
		c, err := fsm.PreparedPart(fsm.Generation(tx), id[:])
		if err == nil && c != nil {
			meta = c.Meta
		}
		return nil
	})
	return meta, meta != nil
}

// TxWait waits until no prepared transaction part holds a name that can
// change the answer for qname in zone (both canonical), or ctx ends.
func (r *Replica) TxWait(ctx context.Context, zone, qname string) error {
	for {
		held, changed := r.locks.holds(zone, qname)
		if !held {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TxHeld reports whether transactions hold names on this member.
func (r *Replica) TxHeld() bool { return r.locks.n.Load() > 0 }
