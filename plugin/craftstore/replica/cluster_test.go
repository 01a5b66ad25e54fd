package replica

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/faultnet"

	"github.com/miekg/dns"
)

// testCluster runs members in-process on loopback, each on its own bbolt
// file in a temporary directory.
type testCluster struct {
	t       testing.TB
	dir     string
	peers   []Member
	members map[uint64]*Replica
	snap    uint64
	// net, when set, stands between the members (newFaultCluster): member
	// i reaches member j through the link i→j, and peers holds the
	// addresses the members listen on.
	net *faultnet.Net
	// tick is the members' Raft tick (20ms if zero: elections in 200-400ms).
	tick time.Duration
	// dirs, when set, overrides the data directory of some members.
	dirs map[uint64]string
	// paged, when above 0, starts the members in paged mode with a cache
	// of that many names.
	paged int
}

// freeAddr returns a loopback address that was free a moment ago, on a
// port below the kernel's ephemeral range (32768 and up on Linux) and below
// the integration tests' (20000 and up), never handed out before in this
// process: a port the kernel gave to a listener on port 0 (a faultnet link)
// or to an outgoing connection between the check and the member's own
// listen would make the member fail to start.
func freeAddr(t testing.TB) string {
	addrMu.Lock()
	defer addrMu.Unlock()
	for try := 0; try < 1000; try++ {
		p := 10000 + rand.IntN(10000)
		if addrsUsed[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		addrsUsed[p] = true
		return ln.Addr().String()
	}
	t.Fatal("no free port found")
	return ""
}

var (
	addrMu    sync.Mutex
	addrsUsed = map[int]bool{}
)

// testPaged puts every test cluster's members in paged mode with a cache
// of that many names: CRAFTSTORE_TEST_PAGED=64 go test runs the package's
// tests against paged views.
var testPaged, _ = strconv.Atoi(os.Getenv("CRAFTSTORE_TEST_PAGED"))

func newTestCluster(t testing.TB, n int, snapshotEntries uint64) *testCluster {
	c := &testCluster{t: t, dir: t.TempDir(), members: map[uint64]*Replica{}, snap: snapshotEntries}
	c.addPeers(n)
	c.startAll()
	return c
}

// addPeers makes members 1 to n, listening on free loopback addresses.
func (c *testCluster) addPeers(n int) {
	for i := 1; i <= n; i++ {
		c.peers = append(c.peers, Member{ID: uint64(i), Raft: freeAddr(c.t)})
	}
}

// startAll starts every member; they are closed when the test ends.
func (c *testCluster) startAll() {
	for _, p := range c.peers {
		c.start(p.ID, false)
	}
	c.t.Cleanup(func() {
		for _, r := range c.members {
			r.Close()
		}
	})
}

func (c *testCluster) start(id uint64, join bool) *Replica {
	c.t.Helper()
	var addr string
	for _, p := range c.peers {
		if p.ID == id {
			addr = p.Raft
		}
	}
	r, err := Open(Config{
		ID:              id,
		Dir:             cmp.Or(c.dirs[id], filepath.Join(c.dir, fmt.Sprint(id))),
		RaftAddr:        addr,
		Peers:           c.peersOf(id),
		Join:            join,
		SnapshotEntries: c.snap,
		CatchupEntries:  c.snap / 2,
		Tick:            cmp.Or(c.tick, 20*time.Millisecond),
		Logger:          testLogger{c.t, id},
		PagedCache:      cmp.Or(c.paged, testPaged),
	})
	if err != nil {
		c.t.Fatalf("starting member %d: %v", id, err)
	}
	c.members[id] = r
	return r
}

// peersOf is the group as member id dials it: through its links when the
// cluster has a faultnet.
func (c *testCluster) peersOf(id uint64) []Member {
	if c.net == nil {
		return c.peers
	}
	var out []Member
	for _, p := range c.peers {
		if p.ID != id {
			p.Raft = c.net.Get(fmt.Sprint(id), fmt.Sprint(p.ID)).Addr()
		}
		out = append(out, p)
	}
	return out
}

func (c *testCluster) stop(id uint64) {
	c.t.Helper()
	if err := c.members[id].Close(); err != nil {
		c.t.Fatalf("closing member %d: %v", id, err)
	}
	delete(c.members, id)
}

// eventually polls cond for up to 20s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func (c *testCluster) leader() *Replica {
	c.t.Helper()
	var l *Replica
	eventually(c.t, "a leader", func() bool {
		for _, r := range c.members {
			if r.IsLeader() {
				l = r
				return true
			}
		}
		return false
	})
	return l
}

func (c *testCluster) follower() *Replica {
	l := c.leader()
	for _, r := range c.members {
		if r != l {
			return r
		}
	}
	return l
}

const testZone = `$ORIGIN example.org.
$TTL 300
@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300
@ IN NS ns1
ns1 IN A 192.0.2.53
www IN A 192.0.2.10
`

func parseTestZone(t testing.TB) []dns.RR {
	var rrs []dns.RR
	zp := dns.NewZoneParser(strings.NewReader(testZone), "example.org.", "")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		rrs = append(rrs, rr)
	}
	if err := zp.Err(); err != nil {
		t.Fatal(err)
	}
	return rrs
}

func mustRR(t testing.TB, s string) dns.RR {
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// has reports whether member r answers name/A with ip from its view.
func has(r *Replica, name, ip string) bool {
	z := r.Zone("example.org.")
	if z == nil {
		return false
	}
	for _, rr := range z.RRs(name, dns.TypeA) {
		if a, ok := rr.(*dns.A); ok && a.A.String() == ip {
			return true
		}
	}
	return false
}

func (c *testCluster) everywhere(name, ip string) {
	c.t.Helper()
	eventually(c.t, name+" on every member", func() bool {
		for _, r := range c.members {
			if !has(r, name, ip) {
				return false
			}
		}
		return true
	})
}

func TestReplicateWrites(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	f := c.follower()
	res, err := f.PutZone(ctx(t), "example.org.", parseTestZone(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 4 || res.Serial != 1 {
		t.Errorf("expected 4 records serial 1, got %+v", res)
	}
	// Read-your-writes on the member that took the write.
	if !has(f, "www.example.org.", "192.0.2.10") {
		t.Fatal("expected the import applied on the proposing member when PutZone returns")
	}
	serial, err := f.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "new.example.org. 60 IN A 192.0.2.77")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if serial != 2 {
		t.Errorf("expected serial 2, got %d", serial)
	}
	if !has(f, "new.example.org.", "192.0.2.77") {
		t.Fatal("expected read-your-writes")
	}
	c.everywhere("new.example.org.", "192.0.2.77")

	// Refusals are deterministic and change nothing.
	_, err = f.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "new.example.org. 60 IN CNAME www.example.org.")}, nil)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("expected a conflict for CNAME beside A, got %v", err)
	}
	_, err = f.Change(ctx(t), "example.org.", nil, []Deletion{{Name: "example.org.", Type: dns.TypeSOA}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("expected an invalid change for deleting the SOA, got %v", err)
	}
	if soa := f.Zone("example.org.").SOA(); soa == nil || soa.Serial != 2 {
		t.Errorf("expected serial still 2 after refusals, got %v", soa)
	}
}

func TestLeaderFailover(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	l := c.leader()
	if _, err := l.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	old := l.ID()
	c.stop(old)
	nl := c.leader()
	if nl.ID() == old {
		t.Fatal("expected a new leader")
	}
	for i := 0; i < 20; i++ {
		if _, err := c.follower().Change(ctx(t), "example.org.", []dns.RR{mustRR(t, fmt.Sprintf("h%d.example.org. 60 IN A 192.0.2.%d", i, i))}, nil); err != nil {
			t.Fatalf("write %d with one member down: %v", i, err)
		}
	}
	c.start(old, false)
	c.everywhere("h19.example.org.", "192.0.2.19")
	for i := 0; i < 20; i++ {
		if !has(c.members[old], fmt.Sprintf("h%d.example.org.", i), fmt.Sprintf("192.0.2.%d", i)) {
			t.Errorf("restarted member misses h%d", i)
		}
	}
}

func TestNoQuorum(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	l := c.leader()
	if _, err := l.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	survivor := c.follower()
	for id := range c.members {
		if id != survivor.ID() {
			c.stop(id)
		}
	}
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := survivor.Change(short, "example.org.", []dns.RR{mustRR(t, "lost.example.org. 60 IN A 192.0.2.1")}, nil)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("expected unavailable without quorum, got %v", err)
	}
	if has(survivor, "lost.example.org.", "192.0.2.1") {
		t.Error("a write without quorum must not be applied")
	}
}

func TestSnapshotCatchUp(t *testing.T) {
	c := newTestCluster(t, 3, 20)
	l := c.leader()
	if _, err := l.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	lagging := c.follower().ID()
	c.stop(lagging)
	for i := 0; i < 120; i++ {
		if _, err := c.leader().Change(ctx(t), "example.org.", []dns.RR{mustRR(t, fmt.Sprintf("s%d.example.org. 60 IN A 198.51.100.%d", i, i%250))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	first, err := c.leader().store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 2 {
		t.Fatalf("expected the leader's log compacted, first index %d", first)
	}
	r := c.start(lagging, false)
	c.everywhere("s119.example.org.", "198.51.100.119")
	if r.snapIndex == 0 {
		t.Error("expected the lagging member to have installed a snapshot")
	}
	if got, want := r.Zone("example.org.").Records(), c.leader().Zone("example.org.").Records(); got != want {
		t.Errorf("expected %d records after catch-up, got %d", want, got)
	}
	// And it survives a restart from the installed snapshot.
	c.stop(lagging)
	r = c.start(lagging, false)
	if !has(r, "s119.example.org.", "198.51.100.119") {
		t.Error("expected data kept across a restart after a snapshot install")
	}
	if _, err := c.leader().Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "after.example.org. 60 IN A 192.0.2.250")}, nil); err != nil {
		t.Fatal(err)
	}
	c.everywhere("after.example.org.", "192.0.2.250")
}

func TestAddRemoveMember(t *testing.T) {
	c := newTestCluster(t, 3, 10)
	l := c.leader()
	if _, err := l.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		if _, err := c.leader().Change(ctx(t), "example.org.", []dns.RR{mustRR(t, fmt.Sprintf("m%d.example.org. 60 IN A 203.0.113.%d", i, i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	m4 := Member{ID: 4, Raft: freeAddr(t)}
	if err := c.follower().AddMember(ctx(t), m4); err != nil {
		t.Fatal(err)
	}
	c.peers = append(c.peers, m4)
	c.start(4, true)
	c.everywhere("m29.example.org.", "203.0.113.29")
	st, err := c.members[4].Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 4 {
		t.Errorf("expected 4 members, got %+v", st.Members)
	}

	// Remove a follower that is not the new one; the group goes on with three.
	var victim uint64
	for id, r := range c.members {
		if id != 4 && !r.IsLeader() {
			victim = id
			break
		}
	}
	if err := c.leader().RemoveMember(ctx(t), victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removed member to stop", func() bool { return c.members[victim].Removed() })
	c.stop(victim)
	if _, err := c.leader().Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "three.example.org. 60 IN A 203.0.113.200")}, nil); err != nil {
		t.Fatal(err)
	}
	c.everywhere("three.example.org.", "203.0.113.200")
	if err := c.leader().RemoveMember(ctx(t), victim); err == nil {
		t.Error("expected removing an unknown member to fail")
	}
}

func TestRestartKeepsState(t *testing.T) {
	c := newTestCluster(t, 1, 0)
	r := c.leader()
	if _, err := r.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "kept.example.org. 60 IN A 192.0.2.9")}, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status()
	c.stop(1)
	r = c.start(1, false)
	if !has(r, "kept.example.org.", "192.0.2.9") {
		t.Fatal("expected data kept across a restart")
	}
	if r.applied.Load() != st.Applied {
		t.Errorf("expected applied index %d after restart, got %d", st.Applied, r.applied.Load())
	}
	c.leader()
	if serial, err := r.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "more.example.org. 60 IN A 192.0.2.8")}, nil); err != nil || serial != 3 {
		t.Fatalf("expected serial 3 after restart, got %d, %v", serial, err)
	}
}

type testLogger struct {
	t  testing.TB
	id uint64
}

func (l testLogger) Debugf(f string, v ...any) {
	l.t.Logf("[%d] DEBUG "+f, append([]any{l.id}, v...)...)
}
func (l testLogger) Infof(f string, v ...any) { l.t.Logf("[%d] INFO "+f, append([]any{l.id}, v...)...) }
func (l testLogger) Warningf(f string, v ...any) {
	l.t.Logf("[%d] WARN "+f, append([]any{l.id}, v...)...)
}
func (l testLogger) Errorf(f string, v ...any) {
	l.t.Logf("[%d] ERROR "+f, append([]any{l.id}, v...)...)
}

// TestReadyAfterCatchUp: a member that restarts after missing writes is not
// ready (craftroute sends it nothing) before it has applied them all.
func TestReadyAfterCatchUp(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	if _, err := c.leader().PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	down := c.follower().ID()
	c.stop(down)
	const n = 50
	for i := 0; i < n; i++ {
		if _, err := c.leader().Change(ctx(t), "example.org.", []dns.RR{mustRR(t, fmt.Sprintf("r%d.example.org. 60 IN A 192.0.2.%d", i, i%250))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r := c.start(down, false)
	for i := 0; i < 10000 && !r.Ready(); i++ {
		time.Sleep(time.Millisecond)
	}
	if !r.Ready() {
		t.Fatal("expected the restarted member to become ready")
	}
	for i := 0; i < n; i++ {
		if !has(r, fmt.Sprintf("r%d.example.org.", i), fmt.Sprintf("192.0.2.%d", i%250)) {
			t.Fatalf("ready, but r%d, written while the member was down, is missing", i)
		}
	}
}

// TestOpenRefusesOtherOwner: a data directory made for one cluster and
// member is refused to another cluster name or member id, with a clear
// error, and the file is left as it was.
func TestOpenRefusesOtherOwner(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{ID: 1, Cluster: "blue", Dir: dir, RaftAddr: "127.0.0.1:0",
		Peers: []Member{{ID: 1, Raft: "127.0.0.1:0"}}, Tick: 10 * time.Millisecond}
	r, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	before, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(c *Config)
		want string
	}{
		{func(c *Config) { c.Cluster = "green" }, `belongs to cluster "blue", not "green"`},
		{func(c *Config) { c.ID = 2 }, "belongs to member 1, not 2"},
	} {
		c := cfg
		tc.edit(&c)
		if r, err := Open(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			if r != nil {
				r.Close()
			}
			t.Errorf("expected an error with %q, got %v", tc.want, err)
		}
	}
	after, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("a refused open changed the data file")
	}
	r, err = Open(cfg)
	if err != nil {
		t.Fatalf("the directory's own member: %v", err)
	}
	r.Close()
}

// TestLearners: a member added as a learner catches up without counting
// for a majority (with two of the three voters stopped, no write commits
// though the learner runs); promoted, it counts; a voter demoted to learner
// keeps its data and leaves the majority (two of three voters commit with
// the demoted one stopped); promoted again it catches up. Refused: the same
// role twice, demoting the last voter, re-adding a removed id.
func TestLearners(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	if _, err := c.leader().PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	m4 := Member{ID: 4, Raft: freeAddr(t), Learner: true}
	if err := c.follower().AddMember(ctx(t), m4); err != nil {
		t.Fatal(err)
	}
	c.peers = append(c.peers, m4)
	c.start(4, true)
	if _, err := c.leader().Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "l1.example.org. 60 IN A 192.0.2.1")}, nil); err != nil {
		t.Fatal(err)
	}
	c.everywhere("l1.example.org.", "192.0.2.1")
	role := func(id uint64) string {
		st, err := c.members[4].Status()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Members {
			if m.ID == id {
				if m.Learner {
					return "learner"
				}
				return "voter"
			}
		}
		return "none"
	}
	if r := role(4); r != "learner" {
		t.Fatalf("expected member 4 a learner, got %s", r)
	}
	if err := c.leader().AddMember(ctx(t), m4); !errors.Is(err, ErrConflict) {
		t.Errorf("adding a learner twice: expected a conflict, got %v", err)
	}

	// Promoted (no address given: it keeps its own), it is a voter.
	if err := c.leader().AddMember(ctx(t), Member{ID: 4}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "member 4 a voter", func() bool { return role(4) == "voter" })

	// Demote a follower other than 4 and stop it, and stop the third
	// follower too: the leader and 4 are two of three voters and commit
	// (with the demoted member a voter, two of four would not).
	var demoted, other uint64
	for id, r := range c.members {
		switch {
		case id == 4 || r.IsLeader():
		case demoted == 0:
			demoted = id
		default:
			other = id
		}
	}
	if err := c.leader().AddMember(ctx(t), Member{ID: demoted, Learner: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the demoted member a learner", func() bool { return role(demoted) == "learner" })
	c.stop(demoted)
	c.stop(other)
	if _, err := c.leader().Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "l2.example.org. 60 IN A 192.0.2.2")}, nil); err != nil {
		t.Fatalf("a write with the demoted member and another stopped: %v", err)
	}
	c.start(other, false)
	st, _ := c.leader().Status()
	voters := 0
	for _, m := range st.Members {
		if !m.Learner {
			voters++
		}
	}
	if voters != 3 || len(st.Members) != 4 {
		t.Errorf("expected 3 voters of 4 members, got %+v", st.Members)
	}

	// Back and promoted, it catches up with what it missed.
	c.start(demoted, false)
	if err := c.leader().AddMember(ctx(t), Member{ID: demoted}); err != nil {
		t.Fatal(err)
	}
	c.everywhere("l2.example.org.", "192.0.2.2")

	// Refusals.
	solo := newTestCluster(t, 1, 0)
	if err := solo.leader().AddMember(ctx(t), Member{ID: 1, Learner: true}); !errors.Is(err, ErrConflict) {
		t.Errorf("demoting the last voter: expected a conflict, got %v", err)
	}
	if err := c.leader().RemoveMember(ctx(t), 4); err != nil {
		t.Fatal(err)
	}
	eventually(t, "member 4 removed", func() bool { return c.leader().isRemoved(4) })
	if err := c.leader().AddMember(ctx(t), Member{ID: 4, Raft: freeAddr(t)}); !errors.Is(err, ErrConflict) {
		t.Errorf("re-adding a removed id: expected a conflict, got %v", err)
	}
}
