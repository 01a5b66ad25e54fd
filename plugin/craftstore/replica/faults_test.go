package replica

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/faultnet"

	"github.com/miekg/dns"
)

// Tests of liveness under network faults: real members on real bbolt files
// whose Raft links pass through faultnet proxies. They assert outcomes (a
// leader exists, every member has applied the same entries and exports the
// same zone, every acknowledged write is there) with generous deadlines,
// never timings. TestHealFigures measures the timings, on request:
//
//	go test ./plugin/craftstore/replica -run TestHealFigures -v -rounds=20

var (
	rounds = flag.Int("rounds", 0, "rounds of each fault in TestHealFigures (0 skips it)")
	tick   = flag.Duration("tick", 100*time.Millisecond, "Raft tick of TestHealFigures (craftstore's default)")
)

// newFaultCluster starts n members that reach each other only through the
// links of a faultnet.Net.
func newFaultCluster(t testing.TB, n int, tick time.Duration) (*testCluster, *faultnet.Net) {
	fn := faultnet.New()
	t.Cleanup(fn.Close) // after the members' Close (cleanups run last first)
	c := &testCluster{t: t, dir: t.TempDir(), members: map[uint64]*Replica{}, net: fn, tick: tick}
	c.addPeers(n)
	for _, from := range c.peers {
		for _, to := range c.peers {
			if from.ID != to.ID {
				if _, err := fn.Link(fmt.Sprint(from.ID), fmt.Sprint(to.ID), to.Raft); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	c.startAll()
	return c, fn
}

func (c *testCluster) ids() []uint64 {
	var ids []uint64
	for _, p := range c.peers {
		ids = append(ids, p.ID)
	}
	return ids
}

func (c *testCluster) others(id uint64) []uint64 {
	var ids []uint64
	for _, x := range c.ids() {
		if x != id {
			ids = append(ids, x)
		}
	}
	return ids
}

// agreedLeader returns the leader every member follows, or 0.
func (c *testCluster) agreedLeader() uint64 {
	var lead uint64
	for _, r := range c.members {
		l := r.leader.Load()
		if l == 0 || (lead != 0 && l != lead) {
			return 0
		}
		lead = l
	}
	if r := c.members[lead]; r == nil || !r.IsLeader() {
		return 0
	}
	return lead
}

// caughtUp reports whether every member follows one leader and has applied
// what that leader committed. Under a running write load that is a moving
// target: use catchUp there.
func (c *testCluster) caughtUp() bool {
	lead := c.agreedLeader()
	if lead == 0 {
		return false
	}
	return c.appliedAll(c.members[lead].commit.Load())
}

// appliedAll reports whether every member has applied index.
func (c *testCluster) appliedAll(index uint64) bool {
	for _, r := range c.members {
		if r.applied.Load() < index {
			return false
		}
	}
	return true
}

// catchUp waits until every member follows one leader, then until every
// member has applied what that leader had committed by then: while writes
// go on, members catch up with a commit index, not with one that moves.
func (c *testCluster) catchUp(t *testing.T, what string) {
	t.Helper()
	var target uint64
	eventually(t, "a leader every member follows "+what, func() bool {
		lead := c.agreedLeader()
		if lead != 0 {
			target = c.members[lead].commit.Load()
		}
		return lead != 0
	})
	eventually(t, fmt.Sprintf("every member applied index %d %s", target, what), func() bool { return c.appliedAll(target) })
}

// export is member r's copy of example.org as text.
func export(t testing.TB, r *Replica) string {
	var b strings.Builder
	if err := r.Export("example.org.", func(rr dns.RR) error { b.WriteString(rr.String() + "\n"); return nil }); err != nil {
		t.Fatalf("export from member %d: %v", r.ID(), err)
	}
	return b.String()
}

// settled waits until no write is in flight and every member has applied
// the same index, then checks that every member exports the same zone and
// has every acknowledged write.
func (c *testCluster) settled(t *testing.T, acked []string) {
	t.Helper()
	eventually(t, "every member caught up", func() bool {
		if !c.caughtUp() {
			return false
		}
		var applied []uint64
		for _, r := range c.members {
			applied = append(applied, r.applied.Load())
		}
		return slices.Min(applied) == slices.Max(applied)
	})
	var first *Replica
	var want string
	for _, r := range c.members {
		got := export(t, r)
		if first == nil {
			first, want = r, got
			continue
		}
		if got != want {
			t.Errorf("member %d exports another zone than member %d:\n%s\nvs\n%s", r.ID(), first.ID(), got, want)
		}
	}
	for _, r := range c.members {
		var missing []string
		for _, name := range acked {
			if !has(r, name, "192.0.2.1") {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			t.Errorf("member %d misses %d of %d acknowledged writes, e.g. %s", r.ID(), len(missing), len(acked), missing[0])
		}
	}
}

// writeLoad starts a write of a new name every 10ms through each of some
// members (about 100 writes/s each), without waiting for the previous
// ones, as independent clients do, and records which were acknowledged.
// Writes proposed on a follower are forwarded to the leader it knows, so a
// cut leader has many of them in flight towards it.
type writeLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	ack  []string
	// failed counts the writes not acknowledged; slowest is the longest
	// an acknowledged or failed write took.
	failed  []error
	slowest time.Duration
}

func (c *testCluster) startWrites(ids ...uint64) *writeLoad {
	w := &writeLoad{stop: make(chan struct{})}
	for _, id := range ids {
		r := c.members[id]
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				case <-tick.C:
				}
				name := fmt.Sprintf("w%d-%d.example.org.", id, i)
				w.wg.Add(1)
				go func() {
					defer w.wg.Done()
					rr, _ := dns.NewRR(name + " 60 IN A 192.0.2.1")
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					start := time.Now()
					_, err := r.Change(ctx, "example.org.", []dns.RR{rr}, nil)
					took := time.Since(start)
					w.mu.Lock()
					defer w.mu.Unlock()
					w.slowest = max(w.slowest, took)
					if err != nil {
						w.failed = append(w.failed, fmt.Errorf("%s through member %d: %w", name, id, err))
						return
					}
					w.ack = append(w.ack, name)
				}()
			}
		}()
	}
	return w
}

// acked returns how many writes were acknowledged so far.
func (w *writeLoad) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ack)
}

// end stops the writers and returns the acknowledged names.
func (w *writeLoad) end() []string {
	close(w.stop)
	w.wg.Wait()
	return w.ack
}

// startFaultZone starts a fault cluster (tick 0: the tests' 20ms) that
// serves example.org.
func startFaultZone(t *testing.T, n int, tick time.Duration) (*testCluster, *faultnet.Net) {
	c, fn := newFaultCluster(t, n, tick)
	if _, err := c.leader().PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every member caught up", c.caughtUp)
	return c, fn
}

// isolate holds every link of member id (a partition that drops packets:
// connections stay open and what is sent piles up).
func isolate(fn *faultnet.Net, id uint64) { fn.Isolate(fmt.Sprint(id), faultnet.Hold) }

// TestLeaderIsolatedRejoins: the leader is cut off for longer than the
// stream timeout while the others take writes, forward proposals to it
// until they elect another leader, and then commit without it. After the
// heal the ex-leader receives the proposals that were held in the network,
// which raft holds while it knows no leader; the messages behind them must
// still reach it, so that it rejoins and catches up.
func TestLeaderIsolatedRejoins(t *testing.T) {
	c, fn := startFaultZone(t, 3, 0)
	old := c.leader()
	rest := c.others(old.ID())
	w := c.startWrites(rest...)
	eventually(t, "writes before the cut", func() bool { return w.acked() >= 20 })
	isolate(fn, old.ID())
	eventually(t, "a leader among the others", func() bool {
		return c.members[rest[0]].IsLeader() || c.members[rest[1]].IsLeader()
	})
	during := w.acked()
	eventually(t, "writes acknowledged by the majority", func() bool { return w.acked() >= during+100 })
	// Cut off from its group, the ex-leader serves a stale copy: it must
	// stop being ready (health.go), so that the router fails over.
	eventually(t, "the cut-off ex-leader not ready", func() bool { return !old.Ready() })
	time.Sleep(3 * time.Second) // longer than the stream timeout: streams are redialled into the hold
	fn.Heal()
	eventually(t, "the ex-leader following the new leader", func() bool { return c.agreedLeader() != 0 })
	eventually(t, "the ex-leader ready again", old.Ready)
	acked := w.end()
	c.settled(t, acked)
}

// TestBlackoutsRecover: every link cut and healed four times while every
// member takes writes; after each heal there is a leader that every member
// follows and every member catches up.
func TestBlackoutsRecover(t *testing.T) {
	c, fn := startFaultZone(t, 3, 0)
	w := c.startWrites(c.ids()...)
	for round := 1; round <= 4; round++ {
		eventually(t, fmt.Sprintf("writes before blackout %d", round), func() bool { return w.acked() >= 20*round })
		for _, l := range fn.Links() {
			l.Set(faultnet.Hold)
		}
		time.Sleep(3 * time.Second) // many election timeouts and a stream timeout
		fn.Heal()
		c.catchUp(t, fmt.Sprintf("after blackout %d", round))
	}
	acked := w.end()
	c.settled(t, acked)
}

// TestFollowerIsolatedCatchesUp: a follower cut off while the others take
// writes has all of them soon after the heal.
func TestFollowerIsolatedCatchesUp(t *testing.T) {
	c, fn := startFaultZone(t, 3, 0)
	f := c.follower()
	isolate(fn, f.ID())
	w := c.startWrites(c.others(f.ID())...)
	eventually(t, "writes while the follower is cut off", func() bool { return w.acked() >= 100 })
	eventually(t, "the cut-off follower not ready", func() bool { return !f.Ready() })
	fn.Heal()
	eventually(t, "the follower ready again", f.Ready)
	acked := w.end()
	for _, name := range acked[len(acked)-5:] {
		c.everywhere(name, "192.0.2.1")
	}
	c.settled(t, acked)
}

// TestFlappingLinks: for 20s the links of one member flap every second
// (held, passing, dropped, reset, delayed by turns) while writes go to the
// other two: writes keep being acknowledged throughout, and afterwards every
// member has all of them.
func TestFlappingLinks(t *testing.T) {
	c, fn := startFaultZone(t, 3, 0)
	flapper := c.leader().ID() // the leader first: the others must elect one
	w := c.startWrites(c.others(flapper)...)
	eventually(t, "writes before the flapping", func() bool { return w.acked() >= 20 })
	links := fn.Links(fmt.Sprint(flapper))
	modes := []faultnet.Mode{faultnet.Hold, faultnet.Pass, faultnet.Drop, faultnet.Pass, faultnet.Reset, faultnet.Pass, faultnet.Delay, faultnet.Pass}
	last := w.acked()
	for second := 0; second < 20; second++ {
		switch m := modes[second%len(modes)]; m {
		case faultnet.Delay:
			for _, l := range links {
				l.SetDelay(100 * time.Millisecond)
			}
		default:
			faultnet.Set(m, links...)
		}
		time.Sleep(time.Second)
		if second%5 == 4 {
			// Every five seconds, the majority has acknowledged more.
			eventually(t, fmt.Sprintf("writes acknowledged by the majority after %ds of flapping", second+1), func() bool { return w.acked() > last })
			last = w.acked()
		}
	}
	fn.Heal()
	acked := w.end()
	c.settled(t, acked)
}

// TestHealFigures measures, over -rounds rounds of each fault, with members
// ticking every -tick (craftstore's default 100ms: elections in 1-2s), the
// time from the heal until every member follows one leader and until every
// member has applied what that leader had committed then (catchUp), and the writes acknowledged by the
// majority while a minority was cut off. It reports figures; it asserts
// only outcomes.
func TestHealFigures(t *testing.T) {
	if *rounds == 0 {
		t.Skip("figures on request: -rounds N")
	}
	c, fn := startFaultZone(t, 3, *tick)
	type fault struct {
		name string
		cut  func() (writers []uint64)
	}
	faults := []fault{
		{"leader isolated 3s", func() []uint64 {
			l := c.leader().ID()
			isolate(fn, l)
			return c.others(l)
		}},
		{"follower isolated 3s", func() []uint64 {
			f := c.follower().ID()
			isolate(fn, f)
			return c.others(f)
		}},
		{"every link held 3s", func() []uint64 {
			for _, l := range fn.Links() {
				l.Set(faultnet.Hold)
			}
			return c.ids()
		}},
	}
	for _, f := range faults {
		var toLeader, toCaughtUp []time.Duration
		var during []int
		for round := 0; round < *rounds; round++ {
			c.catchUp(t, "before the cut")
			writers := f.cut()
			w := c.startWrites(writers...)
			time.Sleep(3 * time.Second)
			n := w.acked()
			fn.Heal()
			healed := time.Now()
			eventually(t, "a leader after the heal", func() bool { return c.agreedLeader() != 0 })
			toLeader = append(toLeader, time.Since(healed))
			c.catchUp(t, "after the heal")
			toCaughtUp = append(toCaughtUp, time.Since(healed))
			acked := w.end()
			during = append(during, n)
			c.settled(t, acked)
		}
		slices.Sort(toLeader)
		slices.Sort(toCaughtUp)
		slices.Sort(during)
		t.Logf("%s, %d rounds: heal→leader median %v max %v; heal→all caught up median %v max %v; writes acknowledged during the cut: min %d median %d",
			f.name, *rounds, toLeader[len(toLeader)/2].Round(time.Millisecond), toLeader[len(toLeader)-1].Round(time.Millisecond),
			toCaughtUp[len(toCaughtUp)/2].Round(time.Millisecond), toCaughtUp[len(toCaughtUp)-1].Round(time.Millisecond),
			during[0], during[len(during)/2])
	}
}
