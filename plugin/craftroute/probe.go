package craftroute

import (
	"context"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// startProbes probes, every interval, each member that is down: a SOA query
// for qname without recursion. Any response (any rcode) brings the member
// back at once; no response keeps it down for another downFor, so that a
// dead member never gets live traffic just because its down period ran out.
// Probes of one round run concurrently, each bounded by every, and a round
// never overlaps the next. stop ends the probes and waits for them.
//
// A member stays down after a failed probe for at least two intervals, so
// that the next round sees it down even when downFor is shorter than every.
func startProbes(shards []*Shard, every, downFor time.Duration, qname string) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	req := new(dns.Msg)
	req.SetQuestion(dns.Fqdn(qname), dns.TypeSOA)
	req.RecursionDesired = false
	shardproto.RequestFresh(req) // a craftstore member that has not caught up answers SERVFAIL
	extend := max(downFor, 2*every)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A first round asks every member: readiness needs one that answered.
		probeRound(ctx, shards, req, every, extend, true)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			probeRound(ctx, shards, req, every, extend, false)
		}
	}()

	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
}

// probeRound probes the members that are down now (all of them with all),
// concurrently, and waits for all of them.
func probeRound(ctx context.Context, shards []*Shard, req *dns.Msg, timeout, extend time.Duration, all bool) {
	now := time.Now()
	var wg sync.WaitGroup
	for _, s := range shards {
		for _, m := range s.Members {
			if all || m.Down(now) {
				wg.Go(func() { probe(ctx, m, req, timeout, extend) })
			}
		}
	}
	wg.Wait()
}

// probe sends req to m and records the result. Member.exchange sends a copy
// of req, so all probes share one.
func probe(ctx context.Context, m *Member, req *dns.Msg, timeout, extend time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := m.exchange(ctx, req)
	now := time.Now()
	switch {
	case err == nil && resp.Rcode != dns.RcodeServerFailure:
		m.Succeeded(now)
		probeCount.WithLabelValues(m.Shard, m.Addr, "ok").Inc()
	case ctx.Err() == context.Canceled: // stopping: no verdict
	default:
		m.Failed(now, extend)
		probeCount.WithLabelValues(m.Shard, m.Addr, "fail").Inc()
	}
}
