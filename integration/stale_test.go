package integration

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/faultnet"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// TestLoneMemberNotReady: a member of a three-member group whose two peers
// were killed has no leader. Within a few election timeouts its /ready
// fails, craftroute's queries (the partition option) get SERVFAIL with the
// Extended DNS Error "Not Ready", and plain queries still get its last
// state (stale serve, the default), as does the router's query that allows
// a stale answer. Once a peer is back, it is ready again.
func TestLoneMemberNotReady(t *testing.T) {
	c := harness.StartUpdateCluster(t)
	const lone = 1
	c.Procs[1].Kill()
	c.Procs[2].Kill()
	harness.Eventually(t, "the lone member's /ready failing", 20*time.Second, func() bool {
		resp, err := http.Get(c.Ready[lone-1])
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode != http.StatusOK
	})

	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	shardproto.RequestFresh(m)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, c.Addr(lone))
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeServerFailure || !hasEDE(r, dns.ExtendedErrorCodeNotReady) {
		t.Errorf("expected SERVFAIL with EDE Not Ready for the router's query, got %s %v", dns.RcodeToString[r.Rcode], r.IsEdns0())
	}
	if !harness.HasA(c.Addr(lone), "www.example.org", "192.0.2.10") {
		t.Error("expected a plain query to get the lone member's last state")
	}
	// When no member of the group can confirm its state, the router asks
	// again allowing a stale answer: it gets the last state, marked so.
	r, _, err = (&dns.Client{Timeout: 2 * time.Second}).Exchange(shardproto.AllowStale(m), c.Addr(lone))
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || !hasEDE(r, dns.ExtendedErrorCodeStaleAnswer) {
		t.Errorf("expected the last state with EDE Stale Answer for the router's second query, got %v", r)
	}
	// A write to it is refused at once with 503 (not after the write
	// timeout), so that a client tries another member.
	var out struct{ Error string }
	code, err := c.API[lone-1].Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{"lone.example.org. 60 IN A 192.0.2.1"}}, &out)
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(out.Error, "no leader") {
		t.Errorf("expected 503 saying the member knows no leader, got %d %v %q", code, err, out.Error)
	}

	c.Procs[1].Restart()
	harness.WaitReady(t, c.Ready[lone-1], c.Procs...)
}

func hasEDE(r *dns.Msg, code uint16) bool {
	opt := r.IsEdns0()
	if opt == nil {
		return false
	}
	for _, o := range opt.Option {
		if e, ok := o.(*dns.EDNS0_EDE); ok && e.InfoCode == code {
			return true
		}
	}
	return false
}

// TestRouterLeavesStaleMember: a member of a shard is cut off from its peers
// (every Raft link held, as behind a switch that drops packets) while names
// are written through the router and read back through it. The cut-off
// member answers from its old state until it notices (three election
// timeouts without a leader); from then on it is not ready and answers the
// router SERVFAIL "Not Ready", so the router fails over: no query fails, and
// none sent after the member stopped being ready gets its stale answer.
// After the heal it is ready again and answers traffic again.
func TestRouterLeavesStaleMember(t *testing.T) {
	const origin = "stale.example."
	wd := harness.Workdir(t)
	fn := faultnet.New()
	t.Cleanup(fn.Close)
	s := startShardedNet(t, wd, 1, 3, []string{origin}, fn,
		routerSpec{zones: []string{origin}, key: "zone", timeout: "300ms", downFor: "2s", probe: "500ms"})
	r := s.routers[0]
	putZone(t, r.client(), origin, smallZone(origin, 10))
	harness.Eventually(t, "the zone through the router", 20*time.Second, func() bool { return harness.HasA(r.addr(), "h1."+origin, "198.51.100.1") })

	// Writes: a new name every 50ms through the router's API, recorded once
	// acknowledged. Members answer from their own applied state, so a name
	// acknowledged a moment ago may be missing on a healthy follower for a
	// few milliseconds: an answer without the record counts as stale only
	// for a name acknowledged a second or more before the query.
	const lag = time.Second
	type ack struct {
		name string
		at   time.Time
	}
	var (
		mu    sync.Mutex
		acked []ack
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 2000; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			name := fmt.Sprintf("w%d.%s", i, origin)
			code, err := r.client().Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.1"}}, nil)
			if err == nil && code == http.StatusOK {
				mu.Lock()
				acked = append(acked, ack{name, time.Now()})
				mu.Unlock()
			}
		}
	})
	// Reads: 2 clients ask for acknowledged names through the router, one
	// query a millisecond each at most, until stop (bounded in count and
	// time; the bound is far beyond what the test needs, so that reads go
	// on through the heal however fast the machine is).
	deadline := time.Now().Add(3 * time.Minute)
	var sent, failed, stale, staleAfter atomic.Int64
	var notReadyAt atomic.Int64 // unix nanoseconds; 0 while the member is ready
	var firstFailure atomic.Value
	for c := 0; c < 2; c++ {
		wg.Go(func() {
			for n := 0; n < 200000 && time.Now().Before(deadline); n++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				mu.Lock()
				if len(acked) == 0 {
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				a := acked[rand.IntN(len(acked))]
				mu.Unlock()
				name := a.name
				at := time.Now().UnixNano()
				sent.Add(1)
				resp, err := harness.Query(r.addr(), name, dns.TypeA)
				switch {
				case err != nil || resp.Rcode == dns.RcodeServerFailure:
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%s: %v %v", name, err, resp))
				case (resp.Rcode != dns.RcodeSuccess || len(resp.Answer) == 0) && time.Unix(0, at).Sub(a.at) >= lag:
					stale.Add(1)
					if na := notReadyAt.Load(); na != 0 && at > na {
						staleAfter.Add(1)
					}
				}
			}
		})
	}

	a := s.members["a"]
	// The member to cut off: a follower, which the router keeps sending
	// reads to (a leader cut off loses its leadership at once).
	var st struct{ Leader uint64 }
	if code, err := a[0].client().Do("GET", "/v1/cluster", nil, &st); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/cluster: %d %v", code, err)
	}
	cut := a[0]
	if st.Leader == 1 {
		cut = a[1]
	}
	readyURL := fmt.Sprintf("http://127.0.0.1:%d/ready", cut.ready)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log (last 6 KiB):\n%s", cut.name, tail(cut.p.Logs(), 6144))
		}
	})
	time.Sleep(2 * time.Second)
	fn.Isolate(cut.name, faultnet.Hold)
	harness.Eventually(t, cut.name+" not ready", 20*time.Second, func() bool {
		resp, err := http.Get(readyURL)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			notReadyAt.Store(time.Now().UnixNano())
			return true
		}
		return false
	})
	time.Sleep(3 * time.Second) // reads and writes go on with the member not ready
	fn.Heal()
	harness.WaitReady(t, readyURL, s.procs...)
	back := fmt.Sprintf(`member="%s"`, cut.addr())
	answered := func() float64 {
		m := routerMetrics(t, r)
		return metricSum(t, m, "coredns_craftroute_requests_total", back, `rcode="NOERROR"`)
	}
	base := answered()
	harness.Eventually(t, cut.name+" answering the router again", 20*time.Second, func() bool {
		// The router spreads queries over the live members at random;
		// these add to the readers' so that the check does not hang on
		// their pace.
		for range 10 {
			_, _ = harness.Query(r.addr(), "h1."+origin, dns.TypeA)
		}
		return answered() > base
	})
	close(stop)
	wg.Wait()

	t.Logf("%d reads, %d acknowledged writes: %d failed, %d stale answers before %s was not ready, %d after",
		sent.Load(), len(acked), failed.Load(), stale.Load()-staleAfter.Load(), cut.name, staleAfter.Load())
	if failed.Load() > 0 {
		t.Errorf("expected no failed read through the router, got %d; the first: %v", failed.Load(), firstFailure.Load())
	}
	if staleAfter.Load() > 0 {
		t.Errorf("expected no stale answer once %s was not ready, got %d", cut.name, staleAfter.Load())
	}
}
