package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Reads past pending entries. A routed query must see every write its
// group acknowledged before it arrived (fresh.go): the member waits until
// it applied the index the router asks for (CaughtUp) or its leader's
// commit index (Fresh). Applying is synchronous in the Ready loop, so that
// wait is as long as the slowest Ready in the way: a migration's batch
// (thousands of names moved in one entry) holds every query of the shard's
// members for as long as a member takes to apply it, although the batch
// changes none of the names most of them ask about.
//
// The Ready loop therefore says, before it persists and applies a Ready,
// what its committed entries change (pendingReady): the owner names whose
// records they change, the partitions whose names they drop or whose owner
// they change, the shard map epoch they leave, or "everything" (a zone
// created, replaced or deleted, a snapshot, an entry it cannot read). A
// query whose index falls within that Ready is answered from the member's
// views without waiting when none of those changes can change its answer:
// its name, an ancestor (a delegation, a DNAME, its closest encloser), a
// wildcard at an ancestor, a descendant (its existence as an empty
// non-terminal), and, once looked up, the names the answer carries (CNAME
// and DNAME targets, name servers and their glue). For such a query the
// views already hold the state the Ready leaves: the answer is the one it
// would get after waiting. Only committed entries are read (the Ready's
// CommittedEntries, final by Raft's Log Matching), so nothing a new leader
// may overwrite counts.
//
// The entries' data are read cheaply: an operation that changes no answer
// (a transaction's decision, a fence, an import's staging, a member's
// addresses) by its first bytes; a change or an update only when a query
// finds the Ready in its way (the write path pays a copy of its bytes); a
// transaction part when it is prepared (the names it will hold, which a
// reader must not miss: pendingParts keeps what its commit changes, as the
// prepare is in an earlier Ready than its commit).

// pendingReady is what the Ready being persisted and applied changes.
type pendingReady struct {
	last uint64 // the index of its last committed entry
	// base is what the Ready loop read at once: everything (a snapshot,
	// an entry it cannot read), transaction parts, map epochs and
	// partitions. plain are the record changes and UPDATEs, copied: the
	// common writes, whose names only a query that finds the Ready in its
	// way reads (touch), so that the write path pays for none of it.
	base  touch
	plain [][]byte
	once  sync.Once
}

// touch returns what the Ready changes, reading its plain writes' names
// on the first call.
func (p *pendingReady) touch() *touch {
	p.once.Do(func() {
		for _, data := range p.plain {
			c, err := fsm.Unmarshal(data)
			var names []string
			if err == nil {
				names, err = fsm.Touched(c)
			}
			if err != nil {
				p.base.all = true
				continue
			}
			for _, n := range names {
				p.base.addName(c.Zone, n)
			}
		}
		p.plain = nil
	})
	return &p.base
}

// touch is what some committed entries change that a query's answer can
// depend on.
type touch struct {
	all   bool                // anything: the query waits
	names map[string]struct{} // owner names whose records change
	// above holds the proper ancestors of names, below their zone's apex:
	// a name's existence as an empty non-terminal can change with them.
	above map[string]struct{}
	// parts are partitions whose names change (a migration's drop) or
	// whose owner changes (a new map), of partitions in all.
	parts      map[int]struct{}
	partitions int
	keyZone    bool   // the partitions place zones (key mode "zone"), not names
	epoch      uint64 // the shard map epoch the entries leave; 0: no new map
	// serials are the zones whose SOA serial the entries move: every
	// change of a zone's records does, so an answer that carries the
	// zone's SOA (at the apex, or a negative answer's authority) changes
	// with any of them. Partitions (parts) move every zone's.
	serials map[string]struct{}
}

// addName notes that the records of name, in zone, change.
func (t *touch) addName(zone, name string) {
	if t.names == nil {
		t.names, t.above, t.serials = map[string]struct{}{}, map[string]struct{}{}, map[string]struct{}{}
	}
	t.names[name] = struct{}{}
	t.serials[zone] = struct{}{}
	for n := name; ; {
		i := strings.IndexByte(n, '.')
		if i < 0 || i == len(n)-1 {
			return
		}
		n = n[i+1:]
		if n == zone || !dns.IsSubDomain(zone, n) {
			return
		}
		if _, ok := t.above[n]; ok {
			return // and every ancestor above it
		}
		t.above[n] = struct{}{}
	}
}

// addParts notes that the names of partitions ps (of partitions) change.
func (t *touch) addParts(ps []int, partitions int, keyZone bool) {
	if len(ps) == 0 {
		return
	}
	if t.parts != nil && (t.partitions != partitions || t.keyZone != keyZone) {
		t.all = true
		return
	}
	if t.parts == nil {
		t.parts = map[int]struct{}{}
	}
	t.partitions, t.keyZone = partitions, keyZone
	for _, p := range ps {
		t.parts[p] = struct{}{}
	}
}

// changes reports whether the records at name (canonical), in the zone at
// origin, change.
func (t *touch) changes(origin, name string) bool {
	if t.all {
		return true
	}
	if _, ok := t.names[name]; ok {
		return true
	}
	return t.inParts(origin, name)
}

// movesSerial reports whether the SOA serial of the zone at origin
// (canonical) moves.
func (t *touch) movesSerial(origin string) bool {
	if t.all || len(t.parts) > 0 {
		return true
	}
	_, ok := t.serials[origin]
	return ok
}

// inParts reports whether the partitions t changes place name.
func (t *touch) inParts(origin, name string) bool {
	if len(t.parts) == 0 {
		return false
	}
	key := name
	if t.keyZone {
		key = origin
	}
	_, ok := t.parts[shardmap.PartitionOf(key, t.partitions)]
	return ok
}

// affects reports whether the changes can change the answer for qname in
// the zone at origin (both canonical; origin "" when no zone here holds
// qname): qname, an ancestor or a wildcard at one, a descendant, and, for
// a name that does not exist, the existence of its ancestors and of the
// wildcards at them (its closest encloser and the source of synthesis,
// RFC 4592), empty non-terminals included. node tells what the member's
// view holds at a name: records of its own, descendants (partitions name
// no names, so what they may change is looked up there).
func (t *touch) affects(origin, qname string, node func(string) (recs, below bool)) bool {
	if t.all {
		return true
	}
	if origin == "" {
		return false // no zone here: only a new zone (all) changes that
	}
	if _, ok := t.above[qname]; ok && qname != origin {
		return true
	}
	for n := qname; ; {
		if t.changes(origin, n) {
			return true
		}
		if n != qname && t.changes(origin, "*."+n) {
			return true
		}
		if n == origin {
			break
		}
		n = parent(n)
	}
	if qname == origin {
		return false
	}
	parts := len(t.parts) > 0
	recs, below := node(qname)
	if parts && below {
		return true // its descendants may move, and with them its existence
	}
	if recs || below {
		// It exists, and stays: its ancestors exist whatever changes
		// below them, and no wildcard answers for it.
		return false
	}
	// It does not exist: an ancestor that starts or stops existing as an
	// empty non-terminal (a change below it, or names of a partition that
	// moves) changes its closest encloser, a wildcard at one that does so
	// whether it answers.
	for n := parent(qname); ; n = parent(n) {
		if n != origin {
			if _, ok := t.above[n]; ok {
				return true
			}
			if r, _ := node(n); parts && !r {
				return true
			}
		}
		w := "*." + n
		if _, ok := t.above[w]; ok {
			return true
		}
		if _, b := node(w); parts && b {
			return true
		}
		if n == origin || n == "." {
			return false
		}
	}
}

// parent is name less its first label ("." for a name of one label).
func parent(name string) string {
	i := strings.IndexByte(name, '.')
	if i < 0 || i == len(name)-1 {
		return "."
	}
	return name[i+1:]
}

// Pending is what a routed query read past: the changes of committed
// entries the member had not applied when it answered, none of which
// changes the answer's name. nil: none.
type Pending struct {
	p      *pendingReady
	origin string
	z      *zone.Zone // the zone at origin when the read began; nil for none
	past   bool       // the query's index is among them: it read past them
}

// Past reports whether the query read past pending entries: it asked for
// an index the member had not applied, and the answer must not depend on
// what they change (Changes).
func (p *Pending) Past() bool { return p != nil && p.past }

// node reports what the zone's view holds at name: records of its own,
// descendants (both, when no zone holds it: anything may).
func (p *Pending) node(name string) (recs, below bool) {
	if p.z == nil {
		return true, true
	}
	return p.z.Node(name)
}

// Epoch is the shard map epoch the pending entries leave, 0 when they set
// no map.
func (p *Pending) Epoch() uint64 {
	if p == nil {
		return 0
	}
	return p.p.base.epoch // set by the Ready loop before it published p
}

// Through is the index of the last pending entry.
func (p *Pending) Through() uint64 {
	if p == nil {
		return 0
	}
	return p.p.last
}

// Changes reports whether the pending entries change what answer m says
// (looked up in the views for a query read past them): the names of its
// records, the targets its CNAMEs and DNAMEs lead to, the name servers of a
// referral (their glue), the serial of an SOA it carries.
func (p *Pending) Changes(m *dns.Msg) bool {
	if p == nil {
		return false
	}
	t, o := p.p.touch(), p.origin
	if t.all {
		return true
	}
	below := p.node
	for _, rr := range m.Answer {
		if t.affects(o, canonical(rr.Header().Name), below) {
			return true
		}
		switch rr := rr.(type) {
		case *dns.SOA:
			if t.movesSerial(canonical(rr.Hdr.Name)) {
				return true
			}
		case *dns.CNAME:
			if target := canonical(rr.Target); dns.IsSubDomain(o, target) && t.affects(o, target, below) {
				return true
			}
		case *dns.DNAME:
			if target := canonical(rr.Target); dns.IsSubDomain(o, target) && t.affects(o, target, below) {
				return true
			}
		}
	}
	for _, sec := range [][]dns.RR{m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			if h.Rrtype == dns.TypeOPT {
				continue
			}
			if t.changes(o, canonical(h.Name)) {
				return true
			}
			if h.Rrtype == dns.TypeSOA && t.movesSerial(canonical(h.Name)) {
				return true
			}
			if ns, ok := rr.(*dns.NS); ok && t.changes(o, canonical(ns.Ns)) {
				return true
			}
		}
	}
	return false
}

// canonical is name lower-case and fully qualified.
func canonical(name string) string { return dnsname.Lower(dns.Fqdn(name)) }

// ReadFor waits, for a routed query about qname, until the member's views
// answer it as of index (every write the router was told of: CaughtUp) or,
// with fresh, as of its leader's commit index (Fresh): until the member
// applied the index (nil), or until the entries up to it are committed here
// and change nothing the answer depends on (the member then answers past
// them: a Pending, whose Changes the caller checks once it looked the
// answer up). A query that finds the index applied does no more: the
// pending entries are read only for one that would wait for them.
func (r *Replica) ReadFor(ctx context.Context, index uint64, fresh bool, qname string) (*Pending, error) {
	if !r.ready.Load() {
		return nil, Errorf(ErrUnavailable, "member is not ready")
	}
	if fresh {
		var err error
		if index, err = r.readIndex(ctx); err != nil {
			return nil, err
		}
	}
	limit := time.Duration(freshTicks) * r.cfg.Tick
	var deadline time.Time
	for {
		ch := *r.appliedSignal.Load()
		if r.applied.Load() >= index {
			return nil, nil
		}
		if p := r.pending.Load(); p != nil && index <= p.last {
			if pend := r.pendingFor(p, qname); pend != nil {
				pend.past = true
				return pend, nil
			}
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(limit)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, Errorf(ErrUnavailable, "member has not applied index %d within %v (applied %d)", index, limit, r.applied.Load())
		}
		t := time.NewTimer(wait)
		select {
		case <-ch:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, Errorf(ErrUnavailable, "member has not applied index %d (applied %d): %v", index, r.applied.Load(), ctx.Err())
		case <-r.donec:
			t.Stop()
			return nil, Errorf(ErrUnavailable, "member is shutting down")
		}
	}
}

// PendingFor returns what the committed entries the member is applying
// change, when none of it changes the answer for qname (a fence judges a
// router that knows the map epoch they set by it); nil when none are
// pending or they change the answer.
func (r *Replica) PendingFor(qname string) *Pending {
	if p := r.pending.Load(); p != nil {
		return r.pendingFor(p, qname)
	}
	return nil
}

// pendingFor returns p for a query about qname, nil when p changes its
// answer.
func (r *Replica) pendingFor(p *pendingReady, qname string) *Pending {
	pend := &Pending{p: p}
	if pend.z = r.Match(qname); pend.z != nil {
		pend.origin = pend.z.Origin()
	}
	if p.touch().affects(pend.origin, qname, pend.node) {
		return nil
	}
	return pend
}

// partTouch is what a prepared transaction part changes when it commits,
// kept from its prepare (pendingParts).
type partTouch struct {
	all   bool       // it creates or deletes zones (key mode "zone" moves)
	names []zoneName // the records it changes, moves included
	hold  []uint32   // a map part's held partitions
	drop  bool       // it drops the held partitions' names
	m     *shardmap.Map
}

type zoneName struct{ zone, name string }

// maxPendingParts bounds Replica.pendingParts, which starts again when
// full: a commit whose prepare it does not hold changes everything.
const maxPendingParts = 4096

// notePending publishes what rd's committed entries change (pendingReady)
// before they are persisted and applied, and wakes the reads waiting for
// them. The Ready loop calls it.
func (r *Replica) notePending(rd raft.Ready) {
	if len(rd.CommittedEntries) == 0 && raft.IsEmptySnap(rd.Snapshot) {
		return
	}
	p := &pendingReady{}
	if !raft.IsEmptySnap(rd.Snapshot) {
		// Everything may change; the prepared parts come from the snapshot.
		p.base.all = true
		p.last = rd.Snapshot.GetMetadata().GetIndex()
		clear(r.pendingParts)
	}
	prev := r.shardMap.Load()
	var cur *shardmap.Map
	if prev != nil {
		cur = prev.Map
	}
	applied := r.applied.Load()
	for _, e := range rd.CommittedEntries {
		p.last = max(p.last, e.GetIndex())
		if p.base.all || e.GetIndex() <= applied || e.GetType() != pb.EntryNormal {
			// A change of members changes no answer.
			continue
		}
		cur = r.touchEntry(&p.base, &p.plain, e.GetData(), cur)
	}
	r.pending.Store(p)
	r.signalApplied()
}

// touchEntry adds what entry data changes to t, or, for a record change or
// an UPDATE, a copy of data to plain (read later: pendingReady.touch); cur
// is the shard map before it, and it returns the map after it.
func (r *Replica) touchEntry(t *touch, plain *[][]byte, data []byte, cur *shardmap.Map) *shardmap.Map {
	if len(data) == 0 {
		return cur
	}
	if len(data) < 2 {
		t.all = true
		return cur
	}
	switch fsm.Op(data[1]) {
	case fsm.OpTxDecide, fsm.OpTxFence, fsm.OpTxUnfence, fsm.OpMemberInfo, fsm.OpImportBegin, fsm.OpImportChunk:
		return cur // no record, no placement
	case fsm.OpChange, fsm.OpUpdate:
		*plain = append(*plain, bytes.Clone(data))
		return cur
	case fsm.OpTxPrepare, fsm.OpTxCommit, fsm.OpTxAbort:
	default:
		t.all = true // zones created, replaced, deleted; anything else
		return cur
	}
	c, err := fsm.Unmarshal(data)
	if err != nil {
		t.all = true
		return cur
	}
	switch c.Op {
	case fsm.OpTxPrepare:
		// The names it holds: a reader must meet the lock (heldread)
		// rather than read the state before a part whose commit another
		// shard may show already.
		pt, err := partTouchOf(c)
		if err != nil {
			t.all = true
			return cur
		}
		for _, zn := range pt.names {
			t.addName(zn.zone, zn.name)
		}
		if len(r.pendingParts) >= maxPendingParts {
			// Parts whose finish this member never saw (expired): the
			// commits of those still prepared change everything.
			clear(r.pendingParts)
		}
		r.pendingParts[c.Tx] = pt
	case fsm.OpTxAbort:
		delete(r.pendingParts, c.Tx) // the state stays as it was
	case fsm.OpTxCommit:
		pt, ok := r.pendingParts[c.Tx]
		delete(r.pendingParts, c.Tx)
		if !ok {
			// Prepared before this member started, or more parts than it
			// keeps, or not prepared here (the commit changes nothing).
			t.all = true
			return cur
		}
		for _, zn := range pt.names {
			t.addName(zn.zone, zn.name)
		}
		t.all = t.all || pt.all
		if pt.m == nil {
			return cur
		}
		if cur == nil || !cur.SameShards(pt.m) {
			t.all = true // shards join or leave: every fan-out may change
			return pt.m
		}
		moved, err := movedParts(cur, pt.m)
		if err != nil {
			t.all = true
			return pt.m
		}
		keyZone := pt.m.Key == shardmap.KeyZone
		t.addParts(moved, pt.m.Partitions, keyZone)
		if pt.drop {
			held := make([]int, len(pt.hold))
			for i, h := range pt.hold {
				held[i] = int(h)
			}
			t.addParts(held, pt.m.Partitions, keyZone)
		}
		t.epoch = pt.m.Epoch
		return pt.m
	}
	return cur
}

// partTouchOf returns what the part prepared by c changes when it commits.
func partTouchOf(c *fsm.Command) (*partTouch, error) {
	part, err := fsm.Unmarshal(c.Part)
	if err != nil {
		return nil, err
	}
	pt := &partTouch{}
	add := func(zone string, cmd *fsm.Command) error {
		if cmd.Op == fsm.OpMapSet {
			return nil
		}
		names, err := fsm.Touched(cmd)
		for _, n := range names {
			pt.names = append(pt.names, zoneName{zone, n})
		}
		return err
	}
	if err := add(c.Zone, part); err != nil {
		return nil, err
	}
	for _, mv := range part.Moves {
		if err := add(mv.Zone, mv); err != nil {
			return nil, err
		}
	}
	if part.Op == fsm.OpMapSet {
		m := new(shardmap.Map)
		if err := json.Unmarshal(part.Map, m); err != nil {
			return nil, err
		}
		pt.m, pt.hold, pt.drop = m, part.Hold, part.Drop
		pt.all = len(part.Imports) > 0 || part.Drop && m.Key == shardmap.KeyZone
	}
	return pt, nil
}

// movedParts returns the partitions whose owner differs between maps a and
// b (the same shards and partitions).
func movedParts(a, b *shardmap.Map) ([]int, error) {
	ra, err := a.Ring()
	if err != nil {
		return nil, err
	}
	rb, err := b.Ring()
	if err != nil {
		return nil, err
	}
	var moved []int
	for p := range a.Partitions {
		if ra.Owner(p) != rb.Owner(p) {
			moved = append(moved, p)
		}
	}
	return moved, nil
}

// appliedPending ends the Ready's pendingReady once the member applied it.
func (r *Replica) appliedPending() { r.pending.Store(nil) }
