package replica

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestReadPastPending holds a follower's Ready loop with a committed
// change it has not persisted or applied: a routed read of a name the
// change cannot touch is answered at once from the views, one it can
// change (the name, an empty non-terminal above it, a name a wildcard of
// it synthesizes) waits until the follower applied it.
func TestReadPastPending(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	l := c.leader()
	if _, err := l.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	f := c.follower()
	c.everywhere("www.example.org.", "192.0.2.10")
	// A member answers routed reads once ready (it confirmed its state
	// with the leader), which a loaded machine may take a while for.
	eventually(t, "the follower ready", f.ready.Load)

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(rd raft.Ready) {
		for _, e := range rd.CommittedEntries {
			if d := e.GetData(); e.GetType() == pb.EntryNormal && len(d) > 1 && fsm.Op(d[1]) == fsm.OpChange {
				once.Do(func() { close(held); <-release })
			}
		}
	}
	f.beforePersist.Store(&hook)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	add := []dns.RR{
		mustRR(t, "c.example.org. 60 IN A 192.0.2.3"),
		mustRR(t, "x.b.example.org. 60 IN A 192.0.2.4"),
		mustRR(t, "*.w.example.org. 60 IN A 192.0.2.5"),
	}
	if _, err := l.Change(ctx(t), "example.org.", add, nil); err != nil {
		t.Fatal(err)
	}
	index := l.applied.Load()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the follower's Ready loop did not reach the change")
	}
	if f.applied.Load() >= index {
		t.Fatalf("follower applied %d, the change's index %d: nothing pending", f.applied.Load(), index)
	}

	for _, name := range []string{"www.example.org.", "ns1.example.org.", "example.org.", "none.example.org.", "y.c.example.org.x."} {
		pend, err := f.ReadFor(ctx(t), index, false, name)
		if err != nil || !pend.Past() {
			t.Errorf("%s: want an answer past the pending change, got %v, %v", name, pend, err)
		}
	}
	for _, name := range []string{"c.example.org.", "b.example.org.", "x.b.example.org.", "q.w.example.org.", "w.example.org.", "y.c.example.org."} {
		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		pend, err := f.ReadFor(short, index, false, name)
		cancel()
		if err == nil {
			t.Errorf("%s: the pending change can change its answer, but it did not wait (%v)", name, pend)
		}
	}

	// The names an answer carries count too.
	pend, err := f.ReadFor(ctx(t), index, false, "www.example.org.")
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.Answer = []dns.RR{mustRR(t, "www.example.org. 60 IN CNAME c.example.org.")}
	if !pend.Changes(m) {
		t.Error("a CNAME to a changed name: Changes says no")
	}
	m.Answer = []dns.RR{mustRR(t, "www.example.org. 60 IN A 192.0.2.10")}
	m.Ns = []dns.RR{mustRR(t, "example.org. 60 IN NS ns1.example.org.")}
	if pend.Changes(m) {
		t.Error("an answer of unchanged names: Changes says yes")
	}
	m.Ns = []dns.RR{mustRR(t, "sub.example.org. 60 IN NS c.example.org.")}
	if !pend.Changes(m) {
		t.Error("a referral to a changed name server (its glue): Changes says no")
	}
	// The change moves the zone's serial: an answer with its SOA, at the
	// apex or in a negative answer's authority, changes with it.
	m.Answer, m.Ns = []dns.RR{mustRR(t, "example.org. 60 IN SOA ns1.example.org. hostmaster.example.org. 1 7200 3600 1209600 300")}, nil
	if !pend.Changes(m) {
		t.Error("the apex's SOA, whose serial the change moves: Changes says no")
	}
	m.Answer, m.Ns = nil, m.Answer
	if !pend.Changes(m) {
		t.Error("a negative answer's SOA, whose serial the change moves: Changes says no")
	}
	m.Ns = []dns.RR{mustRR(t, "example.com. 60 IN SOA ns1.example.com. hostmaster.example.com. 1 7200 3600 1209600 300")}
	if pend.Changes(m) {
		t.Error("another zone's SOA: Changes says yes")
	}

	close(release)
	pend, err = f.ReadFor(ctx(t), index, false, "c.example.org.")
	if err != nil || pend.Past() {
		t.Fatalf("after the follower applied the change: %v, %v", pend, err)
	}
	if !has(f, "c.example.org.", "192.0.2.3") {
		t.Fatal("the follower's view lacks the change it applied")
	}
}

// viewOf is a member's view holding records at names (canonical), for
// touch.affects.
func viewOf(names ...string) func(string) (recs, below bool) {
	return func(name string) (recs, below bool) {
		for _, n := range names {
			recs = recs || n == name
			below = below || n != name && dns.IsSubDomain(name, n)
		}
		return recs, below
	}
}

// TestTouchAffects checks what a query's answer depends on: its name, its
// ancestors and their wildcards, its descendants, and for a name that does
// not exist, the existence of its ancestors and of the wildcards at them.
func TestTouchAffects(t *testing.T) {
	var tc touch
	tc.addName("example.org.", "a.b.c.example.org.")
	view := viewOf("d.example.org.", "a.b.example.org.", "a.b.c.example.org.")
	for name, want := range map[string]bool{
		"a.b.c.example.org.":   true,  // itself
		"b.c.example.org.":     true,  // an empty non-terminal above it
		"c.example.org.":       true,  // and further up
		"example.org.":         false, // the apex exists whatever is below
		"z.a.b.c.example.org.": true,  // below it: its records can be a DNAME's
		"d.example.org.":       false,
		"a.b.example.org.":     false,
		"q.c.example.org.":     true,  // no such name: its closest encloser c may appear or go
		"q.d.example.org.":     false, // no such name, under one that stays
		"zz.example.org.":      false,
	} {
		if got := tc.affects("example.org.", name, view); got != want {
			t.Errorf("name change: %s affected %v, want %v", name, got, want)
		}
	}
	var wc touch
	wc.addName("example.org.", "*.w.example.org.")
	view = viewOf("w2.example.org.", "*.w.example.org.")
	if !wc.affects("example.org.", "q.w.example.org.", view) || !wc.affects("example.org.", "p.q.w.example.org.", view) {
		t.Error("a wildcard's change does not affect the names it synthesizes")
	}
	if wc.affects("example.org.", "w2.example.org.", view) {
		t.Error("a wildcard's change affects a name outside it")
	}
	// A name below a wildcard makes it an empty non-terminal, which
	// answers NODATA for the names it covers (RFC 4592 section 2.2.2).
	var ec touch
	ec.addName("example.org.", "x.*.we.example.org.")
	if !ec.affects("example.org.", "foo.we.example.org.", viewOf("x.*.we.example.org.")) {
		t.Error("a change below a wildcard does not affect the names it covers")
	}

	// Partitions: the names they place, ancestors' too; a name with
	// descendants (which may be in them) as well; a name that does not
	// exist, when an ancestor exists only by its descendants (an empty
	// non-terminal) or a wildcard at one has descendants.
	const parts = shardmap.DefaultPartitions
	var pt touch
	pt.addParts([]int{shardmap.PartitionOf("dev1.fleet.example.org.", parts)}, parts, false)
	notIn := func(name string) bool {
		p := shardmap.PartitionOf(name, parts)
		_, moved := pt.parts[p]
		return !moved
	}
	other := "dev2.fleet.example.org."
	for i := 3; !notIn(other) || !notIn("fleet.example.org.") || !notIn("example.org."); i++ {
		other = "dev" + string(rune('0'+i%10)) + "x.fleet.example.org."
	}
	view = viewOf("dev1.fleet.example.org.", other, "fleet.example.org.")
	if !pt.affects("example.org.", "dev1.fleet.example.org.", view) {
		t.Error("a name in a changed partition is not affected")
	}
	if pt.affects("example.org.", other, view) {
		t.Errorf("%s, in another partition, is affected", other)
	}
	if !pt.affects("example.org.", other, func(string) (bool, bool) { return true, true }) {
		t.Errorf("%s, with descendants, is not affected", other)
	}
	if !pt.affects("example.org.", "x.dev1.fleet.example.org.", view) {
		t.Error("a name below one in a changed partition is not affected")
	}
	absent := "nope0.example.org."
	for i := 1; !notIn(absent) || !notIn("*.example.org."); i++ {
		absent = "nope" + string(rune('0'+i%10)) + "x.example.org."
	}
	if pt.affects("example.org.", absent, view) {
		t.Errorf("%s, in another partition, no such name under the apex, is affected", absent)
	}
	if !pt.affects("example.org.", absent, viewOf("x.*.example.org.")) {
		t.Errorf("%s: a wildcard at its closest encloser has descendants, which may move; not affected", absent)
	}
	ent := viewOf("dev1.fleet.example.org.", other)
	if !pt.affects("example.org.", "x"+absent[:len(absent)-len("example.org.")]+"fleet.example.org.", ent) {
		t.Error("no such name below an empty non-terminal, whose descendants may move: not affected")
	}
	var zt touch
	zt.addParts([]int{shardmap.PartitionOf("example.org.", parts)}, parts, true)
	if !zt.affects("example.org.", "www.example.org.", view) || zt.affects("example.net.", "www.example.net.", viewOf("www.example.net.")) && shardmap.PartitionOf("example.net.", parts) != shardmap.PartitionOf("example.org.", parts) {
		t.Error("key mode zone: partitions place origins")
	}
}

// TestTouchMapPart reads a migration batch's map part from its entries: the
// prepare holds its moves' names, the commit changes them and the moved
// partitions, and sets the new epoch; a commit whose prepare the member
// did not see changes everything.
func TestTouchMapPart(t *testing.T) {
	const parts = shardmap.MinPartitions
	owners := func(moved ...int) []string {
		o := make([]string, parts)
		for i := range o {
			o[i] = "a"
			if slices.Contains(moved, i) {
				o[i] = "b"
			}
		}
		return o
	}
	shards := []shardmap.Shard{{Name: "a", Members: []string{"127.0.0.1:1"}}, {Name: "b", Members: []string{"127.0.0.1:2"}}}
	cur := &shardmap.Map{Epoch: 4, Key: shardmap.KeyName, Partitions: parts, Load: shardmap.DefaultLoad, Shards: shards, Owners: owners()}
	next := *cur
	next.Epoch, next.Owners = 5, owners(7, 9)
	mj, err := json.Marshal(&next)
	if err != nil {
		t.Fatal(err)
	}
	move := &fsm.Command{Op: fsm.OpChange, Zone: "example.org.", Add: []dns.RR{mustRR(t, "moved.example.org. 60 IN A 192.0.2.1")}}
	part := &fsm.Command{Op: fsm.OpMapSet, Map: mj, Shard: "b", Moves: []*fsm.Command{move}}
	pj, err := part.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	id := [16]byte{1}
	prep, err := (&fsm.Command{Op: fsm.OpTxPrepare, Tx: id, Part: pj}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	commit, err := (&fsm.Command{Op: fsm.OpTxCommit, Tx: id}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	r := &Replica{pendingParts: map[[16]byte]*partTouch{}}
	none := viewOf()

	var tp touch
	if m := r.touchEntry(&tp, nil, prep, cur); m != cur || tp.all || tp.epoch != 0 {
		t.Fatalf("prepare: map %v, touch %+v", m, tp)
	}
	if !tp.affects("example.org.", "moved.example.org.", none) || len(tp.parts) != 0 {
		t.Errorf("prepare: want the moved name held, no partitions: %+v", tp)
	}
	var tcm touch
	if m := r.touchEntry(&tcm, nil, commit, cur); m.Epoch != 5 || tcm.all || tcm.epoch != 5 {
		t.Fatalf("commit: map %v, touch %+v", m, tcm)
	}
	if !tcm.affects("example.org.", "moved.example.org.", none) {
		t.Error("commit: the moved name is not changed")
	}
	if len(tcm.parts) != 2 || tcm.partitions != parts {
		t.Errorf("commit: want partitions 7 and 9 changed, got %v of %d", tcm.parts, tcm.partitions)
	}
	var again touch
	r.touchEntry(&again, nil, commit, cur)
	if !again.all {
		t.Error("a commit without its prepare does not change everything")
	}
	var dec touch
	d, err := (&fsm.Command{Op: fsm.OpTxDecide, Tx: id, Outcome: 1}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if r.touchEntry(&dec, nil, d, cur); dec.all || len(dec.names) != 0 {
		t.Errorf("a decision changes %+v", dec)
	}
	del, err := (&fsm.Command{Op: fsm.OpDeleteZone, Zone: "example.org."}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var dz touch
	if r.touchEntry(&dz, nil, del, cur); !dz.all {
		t.Error("a deleted zone does not change everything")
	}
}
