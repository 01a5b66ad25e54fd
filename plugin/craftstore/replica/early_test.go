package replica

import (
	"math"
	"testing"
	"time"

	"github.com/miekg/dns"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestLeaderSendsWhilePersisting: a leader sends a Ready's appends before
// it persists them (Raft thesis §10.2.1), so that its followers write them
// to disk while it does. The test holds the leader's bbolt writer lock, so
// that its Ready loop waits in persist, proposes a change to it, and finds
// the change's entry in both followers' logs meanwhile; once it lets go,
// the change is acknowledged and applied on every member.
func TestLeaderSendsWhilePersisting(t *testing.T) {
	// A tick of 100 ms: no election while the leader's loop is held.
	c := &testCluster{t: t, dir: t.TempDir(), members: map[uint64]*Replica{}, tick: 100 * time.Millisecond}
	c.addPeers(3)
	c.startAll()
	l := c.leader()
	if _, err := l.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every member caught up", c.caughtUp)
	last, err := l.store.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	term := l.term.Load()
	rr := mustRR(t, "early.example.org. 60 IN A 192.0.2.77")

	tx, err := l.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	held := true
	release := func() {
		if held {
			held = false
			if err := tx.Rollback(); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()
	done := make(chan error, 1)
	go func() {
		_, err := l.Change(ctx(t), "example.org.", []dns.RR{rr}, nil)
		done <- err
	}()

	// The followers' logs hold an entry of the leader's term after last,
	// with data (not an election's empty entry), while the leader cannot
	// have persisted it.
	appended := func(f *Replica) bool {
		es, err := f.store.Entries(last+1, last+2, math.MaxUint64)
		return err == nil && len(es) == 1 && es[0].GetTerm() == term &&
			es[0].GetType() == pb.EntryNormal && len(es[0].GetData()) > 0
	}
	for _, f := range c.members {
		if f == l {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for !appended(f) {
			if time.Now().After(deadline) {
				t.Fatalf("member %d has not appended the leader's entry %d while the leader persists it", f.ID(), last+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the change returned (%v) before the leader could persist and apply it", err)
	default:
	}
	if a := l.applied.Load(); a > last {
		t.Fatalf("the leader applied %d while its storage was held", a)
	}

	release()
	if err := <-done; err != nil {
		t.Fatalf("the change: %v", err)
	}
	for _, r := range c.members {
		eventually(t, "the change on every member", func() bool { return has(r, "early.example.org.", "192.0.2.77") })
	}
}
