package replica

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/txn"

	"github.com/miekg/dns"
)

// TestTxn: the state machine of a shard's part of a transaction (package
// internal/txn): prepare evaluates and locks without writing, commit
// writes, abort drops, the first decision stands, writes and readers wait
// for the locks, and all of it survives a restart of the group.
func TestTxn(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	r := c.leader()
	const origin = "example.org."
	if _, err := r.PutZone(ctx(t), origin, parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	rr := func(s string) dns.RR { return mustRR(t, s) }
	has := func(m *Replica, name string) bool {
		return len(m.Zone(origin).RRs(name, dns.TypeA)) > 0
	}
	meta := []byte(`{"coordinator":{"shard":"a"}}`)

	// Prepare: nothing written, the name locked.
	id1 := txn.NewID()
	if err := r.TxPrepareChange(ctx(t), id1, origin, []dns.RR{rr("a.example.org. 60 IN A 192.0.2.1")}, nil, meta); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := r.TxPrepareChange(ctx(t), id1, origin, []dns.RR{rr("a.example.org. 60 IN A 192.0.2.1")}, nil, meta); err != nil {
		t.Fatalf("a repeated prepare: %v", err)
	}
	serial := r.Zone(origin).SOA().Serial
	for id, m := range c.members {
		eventually(t, "the lock on every member", func() bool { return m.TxHeld() })
		if has(m, "a.example.org.") {
			t.Errorf("member %d serves a fsm.PreparedPart name", id)
		}
	}
	// Another transaction meets the lock.
	if err := r.TxPrepareChange(ctx(t), txn.NewID(), origin, []dns.RR{rr("a.example.org. 60 IN TXT x")}, nil, meta); !errors.Is(err, ErrBusy) {
		t.Errorf("expected a second prepare on a locked name to be busy, got %v", err)
	}
	// A write to the name waits for the transaction.
	written := make(chan error, 1)
	go func() {
		_, err := r.Change(ctx(t), origin, []dns.RR{rr("a.example.org. 60 IN A 192.0.2.2")}, nil)
		written <- err
	}()
	// Readers of related names wait; others do not.
	for name, wait := range map[string]bool{"a.example.org.": true, "x.a.example.org.": true, "www.example.org.": false, origin: false} {
		cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := r.TxWait(cctx, origin, name)
		cancel()
		if (err != nil) != wait {
			t.Errorf("reader of %s: expected to wait %v, got %v", name, wait, err)
		}
	}
	select {
	case err := <-written:
		t.Fatalf("a write to a locked name went through: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	// The coordinator's first decision stands.
	if o, err := r.TxDecide(ctx(t), id1, txn.Commit); err != nil || o != txn.Commit {
		t.Fatalf("decide: %v %v", o, err)
	}
	if o, err := r.TxDecide(ctx(t), id1, txn.Abort); err != nil || o != txn.Commit {
		t.Fatalf("a second decision: expected commit, got %v %v", o, err)
	}
	// Commit: written, one serial bump, unlocked; the waiting write follows.
	got, err := r.TxCommit(ctx(t), id1)
	if err != nil || got != serial+1 {
		t.Fatalf("commit: serial %d %v (expected %d)", got, err, serial+1)
	}
	if _, err := r.TxCommit(ctx(t), id1); err != nil {
		t.Errorf("a repeated commit: %v", err)
	}
	if err := r.TxAbort(ctx(t), id1); !errors.Is(err, ErrConflict) {
		t.Errorf("abort after commit: expected a conflict, got %v", err)
	}
	if err := <-written; err != nil {
		t.Fatalf("the waiting write: %v", err)
	}
	for id, m := range c.members {
		eventually(t, "the commit and the write after it on every member", func() bool {
			return len(m.Zone(origin).RRs("a.example.org.", dns.TypeA)) == 2 && !m.TxHeld()
		})
		_ = id
	}

	// Abort before prepare: a late prepare is refused as busy (its router
	// runs the request again under a new ID), and locks nothing.
	id2 := txn.NewID()
	if err := r.TxAbort(ctx(t), id2); err != nil {
		t.Fatal(err)
	}
	if err := r.TxPrepareChange(ctx(t), id2, origin, []dns.RR{rr("b.example.org. 60 IN A 192.0.2.1")}, nil, meta); !errors.Is(err, ErrBusy) || errors.Is(err, ErrConflict) {
		t.Errorf("a prepare after its abort: expected busy, got %v", err)
	}
	if r.TxHeld() {
		t.Error("a prepare after its abort left a lock")
	}
	// A prepare that fails locks nothing: a prerequisite, a CNAME beside data.
	nameUsed := &dns.ANY{Hdr: dns.RR_Header{Name: "nope.example.org.", Rrtype: dns.TypeANY, Class: dns.ClassANY}}
	if rcode, err := r.TxPrepareUpdate(ctx(t), txn.NewID(), origin, []dns.RR{nameUsed}, []dns.RR{rr("c.example.org. 60 IN A 192.0.2.3")}, meta); err != nil || rcode != dns.RcodeNameError {
		t.Errorf("a failed prerequisite: expected NXDOMAIN, got %s %v", dns.RcodeToString[rcode], err)
	}
	if err := r.TxPrepareChange(ctx(t), txn.NewID(), origin, []dns.RR{rr("www.example.org. 60 IN CNAME a.example.org.")}, nil, meta); !errors.Is(err, ErrConflict) {
		t.Errorf("a CNAME beside data: expected a conflict, got %v", err)
	}
	if r.TxHeld() {
		t.Error("a failed prepare left a lock")
	}

	// A prepared part survives a restart of the whole group, and aborts.
	id3 := txn.NewID()
	if rcode, err := r.TxPrepareUpdate(ctx(t), id3, origin, nil, []dns.RR{rr("d.example.org. 60 IN A 192.0.2.4")}, meta); err != nil || rcode != dns.RcodeSuccess {
		t.Fatalf("prepare an update: %s %v", dns.RcodeToString[rcode], err)
	}
	var ids []uint64
	for id := range c.members {
		ids = append(ids, id)
	}
	for _, id := range ids {
		c.stop(id)
		c.start(id, false)
	}
	// The new leader holds the lock once it has applied its log again,
	// which may be a moment after it leads (a loaded CI run asked before).
	r = c.leader()
	for deadline := time.Now().Add(5 * time.Second); !r.TxHeld(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lock is gone after a restart")
		}
	}
	if p, err := r.TxPrepared(time.Now().Add(time.Second)); err != nil || len(p) != 1 || p[0].ID != id3 || p[0].Zone != origin || string(p[0].Meta) != string(meta) {
		t.Fatalf("prepared after a restart: %+v %v", p, err)
	}
	if err := r.TxAbort(ctx(t), id3); err != nil {
		t.Fatal(err)
	}
	if r.TxHeld() || has(r, "d.example.org.") {
		t.Error("an aborted part left a lock or data")
	}
}

func TestRelated(t *testing.T) {
	const z = "example.org."
	for _, tc := range []struct {
		locked, qname string
		absent        bool // qname does not exist
		want          bool
	}{
		{"a.example.org.", "a.example.org.", false, true},
		{"a.example.org.", "x.a.example.org.", false, true}, // an ancestor: a cut, a CNAME, existence
		{"x.a.example.org.", "a.example.org.", false, true}, // a descendant: an empty non-terminal
		{"x.example.org.", "example.org.", false, false},    // the apex always exists
		{"example.org.", "x.example.org.", false, true},     // the apex: its NS
		{"*.example.org.", "nx.example.org.", true, true},   // a wildcard
		{"*.example.org.", "example.org.", false, false},
		{"*.b.example.org.", "a.example.org.", true, false},
		{"b.example.org.", "a.example.org.", true, false},
		// Below a wildcard: it exists as an empty non-terminal, answering
		// NODATA for the names it covers that do not exist.
		{"x.*.we.example.org.", "foo.we.example.org.", true, true},
		{"x.*.we.example.org.", "foo.we.example.org.", false, false},
		// Below the closest encloser of a name that does not exist.
		{"x.c.example.org.", "q.c.example.org.", true, true},
		{"x.y.c.example.org.", "q.r.c.example.org.", true, true},
		{"x.c.example.org.", "q.c.example.org.", false, false},
		{"x.c.example.org.", "q.d.example.org.", true, false},
		{"x.example.org.", "q.example.org.", true, false}, // the apex exists anyway
	} {
		if got := related(z, tc.locked, tc.qname, tc.absent); got != tc.want {
			t.Errorf("related(%s, %s, absent %v) = %v, expected %v", tc.locked, tc.qname, tc.absent, got, tc.want)
		}
	}
}

// TestTxLocal: a member's own word on a decision (TxLocal): the decision
// it applied; none, with its voters, when it applied none and its log holds
// none; the decision logged, with its index and term, when its log holds
// one it has not applied (the leader that lost its followers before the
// decision committed).
func TestTxLocal(t *testing.T) {
	// A leader without followers steps down only after a second.
	c := &testCluster{t: t, dir: t.TempDir(), members: map[uint64]*Replica{}, tick: 100 * time.Millisecond}
	c.addPeers(3)
	c.startAll()
	l := c.leader()
	decided, open, stuck := txn.NewID(), txn.NewID(), txn.NewID()
	if o, err := l.TxDecide(ctx(t), decided, txn.Commit); err != nil || o != txn.Commit {
		t.Fatalf("decide: %v %v", o, err)
	}
	f := c.follower()
	eventually(t, "the decision on a follower", func() bool {
		o, _ := f.TxDecided(decided)
		return o == txn.Commit
	})
	for _, r := range []*Replica{l, f} {
		if got, err := r.TxLocal(decided); err != nil || got.Outcome != txn.Commit {
			t.Errorf("member %d, decided: expected commit, got %+v %v", r.ID(), got, err)
		}
		// Unsure for a moment while it applies entries (its state's
		// applied index is ahead of the one handed to raft until the
		// Ready's transaction is done).
		var got TxLocal
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if got, err = r.TxLocal(open); err != nil || !got.Unsure || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || got.Outcome != "" || got.Logged != nil || got.Unsure || got.Term == 0 || !slices.Equal(sortedIDs(got.Voters), []uint64{1, 2, 3}) {
			t.Errorf("member %d, undecided: expected none logged, sure, its term, voters 1-3, got %+v %v", r.ID(), got, err)
		}
	}

	for id := range c.members {
		if id != l.ID() {
			c.stop(id)
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := l.TxDecide(short, stuck, txn.Abort); err == nil {
		t.Fatal("a decision without quorum was acknowledged")
	}
	got, err := l.TxLocal(stuck)
	if err != nil || got.Outcome != "" || got.Unsure || got.Logged == nil || got.Logged.Outcome != txn.Abort || got.Logged.Term != got.Term || got.Logged.Index <= l.Applied() {
		t.Errorf("a decision in the log, not applied: expected abort logged in the member's term past its applied index %d, got %+v %v", l.Applied(), got, err)
	}
	if got, err := l.TxLocal(open); err != nil || got.Logged != nil || got.Unsure {
		t.Errorf("another transaction's decision in the log: expected none logged, got %+v %v", got, err)
	}
}

func sortedIDs(ids []uint64) []uint64 {
	s := slices.Clone(ids)
	slices.Sort(s)
	return s
}
