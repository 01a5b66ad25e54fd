package replica

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/plugin/craftstore/raftlog"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
)

// lockView is the member's in-memory view of the prepared transaction
// parts and the names they hold (txprepared and txlocks in bbolt), for
// readers: a query about a name that a part can change reads past it or
// waits until it finished (package internal/txn, "Atomic visibility").
// The zero value is ready to use.
type lockView struct {
	n       atomic.Int64 // prepared parts; 0: the fast path of every query
	mu      sync.Mutex
	parts   map[[16]byte]lockedPart
	changed chan struct{} // closed, and replaced, when a lock goes
}

// lockedPart is one prepared part: the names it holds, each in its zone
// (a map part's moves hold names of several), and when this member
// applied its prepare (its clock).
type lockedPart struct {
	locks []fsm.LockRef
	at    time.Time
}

// apply records part e as prepared, or as finished.
func (v *lockView) apply(e *fsm.TxEffect) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.parts == nil {
		v.parts = map[[16]byte]lockedPart{}
	}
	if e.Prepared {
		v.parts[e.ID] = lockedPart{locks: e.Locks, at: time.Now()}
	} else {
		delete(v.parts, e.ID)
		v.signal()
	}
	v.n.Store(int64(len(v.parts)))
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
	for id, p := range v.parts {
		if p.at.Before(t) {
			out[id] = p.at
		}
	}
	return out
}

// replace sets the view to parts (from bbolt: at start, after a snapshot;
// they count as prepared now).
func (v *lockView) replace(parts map[[16]byte]lockedPart) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	for id, p := range parts {
		p.at = now
		parts[id] = p
	}
	v.parts = parts
	v.n.Store(int64(len(parts)))
	v.signal()
}

// holders returns the prepared parts that hold a name whose change can
// change the answer for qname in zone: qname itself, an ancestor of it
// (a delegation, a CNAME or the name's existence), a descendant (an empty
// non-terminal) or a wildcard at an ancestor; for a qname that does not
// exist (absent), also a name below an ancestor of qname or below a
// wildcard at one (they exist as empty non-terminals by their
// descendants: qname's closest encloser, RFC 4592); and a channel closed
// when a lock goes.
func (v *lockView) holders(zone, qname string, absent bool) ([]txn.ID, <-chan struct{}) {
	if v.n.Load() == 0 {
		return nil, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var ids []txn.ID
	for id, p := range v.parts {
		if slices.ContainsFunc(p.locks, func(l fsm.LockRef) bool { return l.Zone == zone && related(zone, l.Name, qname, absent) }) {
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

// related reports whether a change at name can change the answer for
// qname in zone (all canonical): name is qname or an ancestor of it (a
// delegation, a CNAME, its existence), a descendant of it (qname may be an
// empty non-terminal; the apex always exists), or a wildcard that can
// synthesize qname; for a qname that does not exist (absent), also a name
// whose ancestor below the apex is an ancestor of qname, or a wildcard at
// one (its existence as an empty non-terminal).
func related(zone, name, qname string, absent bool) bool {
	switch {
	case dns.IsSubDomain(name, qname):
		return true
	case dns.IsSubDomain(qname, name):
		return qname != zone
	}
	if parent, ok := strings.CutPrefix(name, "*."); ok && dns.IsSubDomain(parent, qname) && parent != qname {
		return true
	}
	if !absent {
		return false
	}
	for a := name; ; {
		i := strings.IndexByte(a, '.')
		if i < 0 || i == len(a)-1 {
			return false
		}
		a = a[i+1:]
		if a == zone || !dns.IsSubDomain(zone, a) {
			return false
		}
		if dns.IsSubDomain(a, qname) {
			return true // a, an ancestor of qname, exists by name
		}
		if parent, ok := strings.CutPrefix(a, "*."); ok && dns.IsSubDomain(parent, qname) && parent != qname {
			return true // a, a wildcard covering qname, exists by name
		}
	}
}

// loadLocks reads the lock view from the current generation.
func (r *Replica) loadLocks() error {
	parts := map[[16]byte]lockedPart{}
	err := r.db.View(func(tx *bolt.Tx) error {
		if p := fsm.Generation(tx).Bucket(fsm.BucketTxPrepared); p != nil {
			p.ForEach(func(k, _ []byte) error {
				parts[[16]byte(k)] = lockedPart{}
				return nil
			})
		}
		b := fsm.Generation(tx).Bucket(fsm.BucketTxLocks)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			zone, name, ok := strings.Cut(string(k), "\x00")
			if !ok || len(v) != 16 {
				return nil
			}
			p := parts[[16]byte(v)]
			p.locks = append(p.locks, fsm.LockRef{Zone: zone, Name: name})
			parts[[16]byte(v)] = p
			return nil
		})
	})
	if err != nil {
		return err
	}
	r.locks.replace(parts)
	return nil
}

// TxHolders returns the transactions whose prepared parts on this member
// hold a name that can change the answer for qname in zone (both
// canonical; TxWait waits for them), and a channel closed when one of their
// locks goes.
func (r *Replica) TxHolders(zone, qname string) ([]txn.ID, <-chan struct{}) {
	if r.locks.n.Load() == 0 {
		return nil, nil
	}
	absent := true
	if z := r.Match(qname); z != nil {
		recs, below := z.Node(qname)
		absent = !recs && !below && qname != z.Origin()
	}
	return r.locks.holders(zone, qname, absent)
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

// TxLocal is what one member's own state says of a transaction's decision,
// for a read of it from a majority of the coordinator's group that needs
// no leader (txn.FromMajority, read by craftstore's decision reads).
type TxLocal struct {
	Outcome txn.Outcome // the decision the member applied, "" for none
	// Logged is the first decision of the transaction in the member's log
	// past what it applied; nil for none.
	Logged *txn.Logged
	Term   uint64   // the member's current term, as persisted
	Voters []uint64 // the voters of the configuration it applied
	// Unsure: the member cannot vouch for what its log holds: a change of
	// the configuration is in it past what it applied, or its stored
	// configuration may be older than its data (the entries of a snapshot
	// whose data was newer come again), or it is in a joint configuration,
	// or it is too far behind to read its log (txLocalScan).
	Unsure bool
}

// txLocalScan bounds the log entries TxLocal reads past the applied index.
const txLocalScan = 4096

// TxLocal reads what this member's own state says of transaction id's
// decision (TxLocal), from one moment of its file: no round to the leader.
func (r *Replica) TxLocal(id txn.ID) (TxLocal, error) {
	// Read before the transaction: it is at most what the state the
	// transaction sees reached, so an older value only says Unsure.
	through := r.raftApplied.Load()
	var l TxLocal
	err := r.db.View(func(tx *bolt.Tx) error {
		g := fsm.Generation(tx)
		l.Outcome, _ = fsm.Decided(g, id[:])
		if l.Outcome != "" {
			return nil
		}
		applied, _ := fsm.Applied(g)
		hs, cs, err := raftlog.StateIn(tx)
		if err != nil {
			return err
		}
		l.Term, l.Voters = hs.GetTerm(), cs.GetVoters()
		l.Unsure = through < applied || len(cs.GetVotersOutgoing()) > 0
		n := 0
		return raftlog.ScanIn(tx, applied, func(e *pb.Entry) bool {
			n++
			switch {
			case n > txLocalScan || e.GetType() != pb.EntryNormal:
				l.Unsure = true
			case l.Logged == nil:
				if o, ok := decides(e.GetData(), id); ok {
					l.Logged = &txn.Logged{Index: e.GetIndex(), Term: e.GetTerm(), Outcome: o}
				}
			}
			return !l.Unsure
		})
	})
	return l, err
}

// decides reads the outcome off entry data when it is a decision of
// transaction id.
func decides(data []byte, id txn.ID) (txn.Outcome, bool) {
	if len(data) < 2 || fsm.Op(data[1]) != fsm.OpTxDecide {
		return "", false
	}
	c, err := fsm.Unmarshal(data)
	if err != nil || c.Tx != id {
		return "", false
	}
	return fsm.OutcomeOf(c.Outcome), true
}

// errPreview rolls back the transaction of a preview.
var errPreview = errors.New("preview: rolled back")

// TxPreview returns the names of zone that the prepared part of
// transaction id changes on this member, with their records as its commit
// will leave them
// (fsm.PreviewPart), written nowhere: a write transaction that is rolled
// back. nil when the part is no longer prepared here.
func (r *Replica) TxPreview(id txn.ID, origin string) ([]zone.NameRecords, error) {
	var names []zone.NameRecords
	err := r.db.Update(func(tx *bolt.Tx) error {
		var err error
		if names, err = fsm.PreviewPart(fsm.Generation(tx), id[:], origin); err != nil {
			return err
		}
		return errPreview
	})
	if err != errPreview {
		return nil, err
	}
	return names, nil
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
		ids, changed := r.TxHolders(zone, qname)
		if len(ids) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TxHeld reports whether prepared transaction parts hold names on this
// member.
func (r *Replica) TxHeld() bool { return r.locks.n.Load() > 0 }
