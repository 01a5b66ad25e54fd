package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/faultnet"

	"github.com/miekg/dns"
)

// startFreshZone starts three members on faultnet links, with the test
// zone, and waits until every one is ready (Fresh needs it).
func startFreshZone(t *testing.T) (*testCluster, *faultnet.Net) {
	c, fn := startFaultZone(t, 3, 100*time.Millisecond)
	eventually(t, "every member ready", func() bool {
		for _, r := range c.members {
			if !r.Ready() {
				return false
			}
		}
		return true
	})
	return c, fn
}

// TestFreshSeesAckedWrite: a follower whose link from the leader is slow
// lags the writes the group acknowledged; after Fresh it holds them.
func TestFreshSeesAckedWrite(t *testing.T) {
	c, fn := startFreshZone(t)
	l := c.leader()
	f := c.follower()
	fn.Get(fmt.Sprint(l.ID()), fmt.Sprint(f.ID())).SetDelay(150 * time.Millisecond)

	for i := range 5 {
		name := fmt.Sprintf("fresh%d.example.org.", i)
		if _, err := l.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, name+" 60 IN A 192.0.2.7")}, nil); err != nil {
			t.Fatal(err)
		}
		lagged := !has(f, name, "192.0.2.7")
		if err := f.Fresh(ctx(t)); err != nil {
			t.Fatalf("Fresh on member %d: %v", f.ID(), err)
		}
		if !has(f, name, "192.0.2.7") {
			t.Fatalf("member %d lacks %s, acknowledged before Fresh was called", f.ID(), name)
		}
		t.Logf("write %d: the follower lagged it before Fresh: %v", i, lagged)
	}
}

// TestFreshConcurrent: many concurrent calls, on every member, while
// writes go on, all succeed and each sees the write acknowledged before it.
func TestFreshConcurrent(t *testing.T) {
	c, _ := startFreshZone(t)
	l := c.leader()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := range 20 {
		name := fmt.Sprintf("c%d.example.org.", i)
		if _, err := l.Change(ctx(t), "example.org.", []dns.RR{mustRR(t, name+" 60 IN A 192.0.2.8")}, nil); err != nil {
			t.Fatal(err)
		}
		for _, r := range c.members {
			for range 10 {
				wg.Go(func() {
					if err := r.Fresh(context.Background()); err != nil {
						errs <- fmt.Errorf("member %d: %w", r.ID(), err)
					} else if !has(r, name, "192.0.2.8") {
						errs <- fmt.Errorf("member %d lacks %s after Fresh", r.ID(), name)
					}
				})
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestFreshCutOff: a member cut off from its leader cannot confirm its
// state: Fresh fails with ErrUnavailable (after its bound of a few ticks,
// while the member still counts as ready).
func TestFreshCutOff(t *testing.T) {
	c, fn := startFreshZone(t)
	f := c.follower()
	isolate(fn, f.ID())
	start := time.Now()
	err := f.Fresh(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrUnavailable {
		t.Fatalf("expected ErrUnavailable from a cut-off member, got %v", err)
	}
	t.Logf("cut off: %v after %v", err, time.Since(start).Round(time.Millisecond))
	fn.Heal()
	eventually(t, "Fresh after the heal", func() bool { return f.Fresh(context.Background()) == nil })
}

// TestLateApply: a proposal whose caller gave up (the leader's links to its
// followers are slow) is applied later; the function the caller left with
// WithLate runs then, with the change in the member's views.
func TestLateApply(t *testing.T) {
	c, fn := startFreshZone(t)
	l := c.leader()
	for _, o := range c.others(l.ID()) {
		fn.Get(fmt.Sprint(l.ID()), fmt.Sprint(o)).SetDelay(300 * time.Millisecond)
	}
	called := make(chan bool, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := l.Change(WithLate(ctx, func() { called <- has(l, "late.example.org.", "192.0.2.5") }),
		"example.org.", []dns.RR{mustRR(t, "late.example.org. 60 IN A 192.0.2.5")}, nil)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("expected the caller to give up (ErrNoQuorum), got %v", err)
	}
	select {
	case inView := <-called:
		if !inView {
			t.Error("the late function ran before the change was in the views")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late function did not run")
	}
}
