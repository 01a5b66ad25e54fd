package replica

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestHandOff: handing off leadership costs no write. Writes go through
// every member all the time (the followers' are forwarded to whoever
// leads) while leadership is handed on six times in a row. raft drops
// proposals while it transfers leadership: without the retry of forwarded
// proposals some of the followers' writes would wait for their 2s timeout
// and fail.
func TestHandOff(t *testing.T) {
	c, _ := startFaultZone(t, 3, 0)
	w := c.startWrites(c.ids()...)
	eventually(t, "writes before the first hand-off", func() bool { return w.acked() >= 30 })
	var longest time.Duration
	for round := range 6 {
		old := c.leader()
		start := time.Now()
		// A slow machine (the race detector on two cores) can take
		// seconds, and the followers may be out of touch a moment.
		var next uint64
		var err error
		for range 50 {
			if next, err = old.HandOff(5 * time.Second); err == nil || err.Error() != "no other voter is in touch" {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(start)
		if err != nil {
			t.Fatalf("round %d: hand-off from member %d: %v", round, old.ID(), err)
		}
		if next == old.ID() || c.members[next] == nil {
			t.Fatalf("round %d: leadership went from member %d to %d", round, old.ID(), next)
		}
		longest = max(longest, took)
		before := w.acked()
		eventually(t, "writes after the hand-off", func() bool { return w.acked() >= before+20 })
	}
	acked := w.end()
	switch {
	case len(w.failed) > 0 && raceDetector:
		// Under the race detector on two cores a hand-off can take longer
		// than a write's 2s timeout: what this run checks is the code's
		// races, and that nothing acknowledged is lost (settled, below).
		t.Logf("%d of %d writes timed out (race detector)", len(w.failed), len(w.failed)+len(acked))
	case len(w.failed) > 0:
		t.Errorf("%d of %d writes failed, e.g. %v", len(w.failed), len(w.failed)+len(acked), w.failed[0])
	}
	t.Logf("%d writes acknowledged; longest hand-off %v, slowest write %v", len(acked), longest, w.slowest)
	c.settled(t, acked)
}

// TestHandOffRefused: a member hands off only what it has: a follower is
// not the leader, and a lone member has nobody to hand to.
func TestHandOffRefused(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	if _, err := c.follower().HandOff(100 * time.Millisecond); err == nil {
		t.Error("a follower handed off leadership")
	}
	one := newTestCluster(t, 1, 0)
	if _, err := one.leader().HandOff(100 * time.Millisecond); err == nil {
		t.Error("a lone member handed off leadership")
	}
}

// TestDrain: a stopping member lets the writes in flight finish and
// refuses the others at once with ErrNotReady, having proposed nothing:
// every write is either acknowledged and on every member, or refused and on
// none.
func TestDrain(t *testing.T) {
	c, fn := startFaultZone(t, 3, 0)
	f := c.follower()
	type outcome struct {
		name string
		err  error
	}
	out := make(chan outcome, 40)
	write := func(i int) {
		name := fmt.Sprintf("drain%d.example.org.", i)
		_, err := f.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, name+" 60 IN A 192.0.2.1")}, nil)
		out <- outcome{name, err}
	}
	waiting := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.waiters)
	}
	// Twenty writes in flight: the follower's links hold what it sends.
	isolate(fn, f.ID())
	for i := range 20 {
		go write(i)
	}
	eventually(t, "twenty writes in flight", func() bool { return waiting() == 20 })
	drained := make(chan int, 1)
	go func() { drained <- f.Drain(10 * time.Second) }()
	eventually(t, "the drain", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.draining
	})
	for i := 20; i < 40; i++ {
		go write(i)
	}
	time.Sleep(200 * time.Millisecond)
	fn.Heal()
	if n := <-drained; n != 0 {
		t.Errorf("%d writes still waiting after the drain", n)
	}
	var acked, refused []string
	for range 40 {
		o := <-out
		switch {
		case o.err == nil:
			acked = append(acked, o.name)
		case errors.Is(o.err, ErrNotReady) && errors.Is(o.err, ErrUnavailable):
			refused = append(refused, o.name)
		default:
			t.Errorf("%s: %v", o.name, o.err)
		}
	}
	if len(acked) != 20 || len(refused) != 20 {
		t.Errorf("expected the 20 writes in flight acknowledged and the 20 after the drain refused, got %d and %d", len(acked), len(refused))
	}
	start := time.Now()
	if _, err := f.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, "late.example.org. 60 IN A 192.0.2.1")}, nil); !errors.Is(err, ErrNotReady) {
		t.Errorf("a write after the drain: expected ErrNotReady, got %v", err)
	} else if time.Since(start) > time.Second {
		t.Errorf("the refusal took %v", time.Since(start))
	}
	t.Logf("%d writes acknowledged, %d refused", len(acked), len(refused))
	c.settled(t, acked)
	for _, r := range c.members {
		for _, name := range append(refused, "late.example.org.") {
			if has(r, name, "192.0.2.1") {
				t.Errorf("member %d holds %s, which was refused", r.ID(), name)
			}
		}
	}
}
