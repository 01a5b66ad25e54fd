package craftroute

import (
	"context"
	"errors"
	"net"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// targetMode is how a fake member answers.
type targetMode int

const (
	targetAnswer     targetMode = iota // an A record
	targetTruncate                     // TC over UDP, the A record over TCP
	targetBig                          // 40 A records without truncating: too big for 512 bytes over UDP
	targetSilent                       // never answers
	targetServfail                     // SERVFAIL
	targetNotCurrent                   // SERVFAIL Not Ready, unless the query allows a stale answer
	targetHeld                         // SERVFAIL Held (a transaction holds the name) for the first 3 queries
)

// target is a member on 127.0.0.1, UDP and TCP on one port, that counts
// the queries it gets.
type target struct {
	addr     string
	udp, tcp atomic.Int64
	soa      atomic.Int64 // SOA queries (the probes)
	other    atomic.Int64 // all other queries (live traffic)
}

func startTarget(t testing.TB, mode targetMode) *target {
	t.Helper()
	f := &target{}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		tcp := w.LocalAddr().Network() == "tcp"
		if tcp {
			f.tcp.Add(1)
		} else {
			f.udp.Add(1)
		}
		if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeSOA {
			f.soa.Add(1)
		} else {
			f.other.Add(1)
		}
		m := new(dns.Msg)
		m.SetReply(r)
		n := 1
		switch mode {
		case targetSilent:
			return
		case targetServfail:
			m.Rcode = dns.RcodeServerFailure
			n = 0
		case targetHeld:
			if f.other.Load() <= 3 {
				w.WriteMsg(ede.Reply(r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, txn.HeldText))
				return
			}
		case targetNotCurrent:
			if !shardproto.StaleAllowed(r) {
				w.WriteMsg(ede.Reply(r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, "not current"))
				return
			}
		case targetTruncate:
			if !tcp {
				m.Truncated = true
				n = 0
			}
		case targetBig:
			n = 40
		}
		for i := range n {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   net.IPv4(192, 0, 2, byte(i+1)),
			})
		}
		w.WriteMsg(m)
	})

	pc, l := dnsdiff.ListenUDPTCP(t)
	f.addr = pc.LocalAddr().String()

	var started sync.WaitGroup
	started.Add(2)
	udp := &dns.Server{PacketConn: pc, Handler: handler, NotifyStartedFunc: started.Done}
	tcp := &dns.Server{Listener: l, Handler: handler, NotifyStartedFunc: started.Done}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	started.Wait()
	t.Cleanup(func() {
		udp.Shutdown()
		tcp.Shutdown()
	})
	return f
}

// targetMember is a started member for f, stopped at the end of the test.
func targetMember(t *testing.T, shard string, f *target, timeout time.Duration) *Member {
	m := newMember(shard, f.addr, timeout, nil)
	m.start()
	t.Cleanup(m.stop)
	return m
}

// memberMetric is the value of a counter or gauge.
func memberMetric(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return -1
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

func targetQuery(id uint16) *dns.Msg {
	req := new(dns.Msg)
	req.SetQuestion("www.example.org.", dns.TypeA)
	req.Id = id
	return req
}

func TestMemberExchange(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     targetMode
		answers  int
		udp, tcp int64
	}{
		{"answer", targetAnswer, 1, 1, 0},
		{"truncated", targetTruncate, 1, 1, 1},
		{"big", targetBig, 40, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startTarget(t, tc.mode)
			m := targetMember(t, "member-"+tc.name, f, time.Second)
			req := targetQuery(4242)
			orig, origText := *req, req.String()

			resp, err := m.Exchange(context.Background(), req)
			if err != nil {
				t.Fatalf("expected no error, got %v", err)
			}
			if resp.Id != 4242 {
				t.Errorf("expected response Id 4242, got %d", resp.Id)
			}
			if resp.Truncated || len(resp.Answer) != tc.answers {
				t.Errorf("expected %d answers, not truncated, got %d (TC %v)", tc.answers, len(resp.Answer), resp.Truncated)
			}
			if !reflect.DeepEqual(*req, orig) || req.String() != origText {
				t.Errorf("expected the request unchanged, got %v", req)
			}
			if u, c := f.udp.Load(), f.tcp.Load(); u != tc.udp || c != tc.tcp {
				t.Errorf("expected %d UDP and %d TCP queries, got %d and %d", tc.udp, tc.tcp, u, c)
			}
			if got := memberMetric(requestCount.WithLabelValues(m.Shard, m.Addr, "NOERROR")); got != 1 {
				t.Errorf("expected requests_total 1, got %v", got)
			}
		})
	}
}

// TestMemberShared sends one request through several members at once: the
// proxy's Id juggling must happen on copies (run with -race).
func TestMemberShared(t *testing.T) {
	f := startTarget(t, targetAnswer)
	m1 := targetMember(t, "member-shared", f, time.Second)
	m2 := targetMember(t, "member-shared", f, time.Second)
	req := targetQuery(7)
	var wg sync.WaitGroup
	for _, m := range []*Member{m1, m2, m1, m2} {
		wg.Go(func() {
			resp, err := m.Exchange(context.Background(), req)
			if err != nil || resp.Id != 7 {
				t.Errorf("expected an answer with Id 7, got %v, %v", resp, err)
			}
		})
	}
	wg.Wait()
	if req.Id != 7 {
		t.Errorf("expected request Id 7, got %d", req.Id)
	}
}

func TestMemberTimeout(t *testing.T) {
	f := startTarget(t, targetSilent)

	// The member's own timeout.
	m := targetMember(t, "member-timeout", f, 50*time.Millisecond)
	if resp, err := m.Exchange(context.Background(), targetQuery(1)); err == nil {
		t.Errorf("expected a timeout, got %v", resp)
	}

	// A context that ends before the member's timeout.
	m = targetMember(t, "member-timeout", f, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := m.Exchange(ctx, targetQuery(1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("expected %v, got %v", context.DeadlineExceeded, err)
	}
	if _, err := m.Exchange(ctx, targetQuery(1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("expected %v for an ended context, got %v", context.DeadlineExceeded, err)
	}
}

func TestMemberStop(t *testing.T) {
	f := startTarget(t, targetAnswer)
	m := newMember("member-stop", f.addr, time.Second, nil)
	m.start()
	if _, err := m.Exchange(context.Background(), targetQuery(1)); err != nil {
		t.Fatal(err)
	}
	m.stop()
	m.stop()
	if resp, err := m.Exchange(context.Background(), targetQuery(1)); err == nil {
		t.Errorf("expected an error after stop, got %v", resp)
	}
	// The proxy's finalizer would stop the transport a second time and panic.
	runtime.GC()
	runtime.GC()
}

func TestMemberLiveness(t *testing.T) {
	m := newMember("member-liveness", "127.0.0.1:1", time.Second, nil)
	now := time.Now()
	down := func() float64 { return memberMetric(memberDown.WithLabelValues(m.Shard, m.Addr)) }

	if m.Down(now) {
		t.Errorf("expected a new member up")
	}
	m.Failed(now, time.Minute)
	if !m.Down(now) || !m.Down(now.Add(59*time.Second)) || m.Down(now.Add(time.Minute)) {
		t.Errorf("expected the member down for exactly a minute")
	}
	if down() != 1 {
		t.Errorf("expected member_down 1, got %v", down())
	}
	m.Failed(now, time.Second) // does not shorten the down period
	if !m.Down(now.Add(30 * time.Second)) {
		t.Errorf("expected the member still down")
	}
	m.Succeeded(now.Add(time.Second))
	if m.Down(now.Add(time.Second)) {
		t.Errorf("expected the member up after a success")
	}
	if down() != 0 {
		t.Errorf("expected member_down 0, got %v", down())
	}
	// A success after the down period ran out clears the gauge too.
	m.Failed(now, time.Second)
	m.Succeeded(now.Add(time.Hour))
	if down() != 0 {
		t.Errorf("expected member_down 0, got %v", down())
	}
	m.Failed(now.Add(time.Hour), 0)
	if m.Down(now.Add(time.Hour)) || down() != 0 {
		t.Errorf("expected a down_for of 0 not to mark the member down")
	}
}

func TestShardOrder(t *testing.T) {
	ms := []*Member{
		newMember("order", "127.0.0.1:1", time.Second, nil),
		newMember("order", "127.0.0.1:2", time.Second, nil),
		newMember("order", "127.0.0.1:3", time.Second, nil),
		newMember("order", "127.0.0.1:4", time.Second, nil),
	}
	s := &Shard{Name: "order", Members: ms}
	now := time.Now()
	dst := make([]*Member, 0, 8)

	// All live: every member comes first some time, in both relative orders.
	first := map[*Member]int{}
	before := 0 // times ms[0] comes before ms[1]
	const tries = 200
	for range tries {
		o := s.Order(now, dst)
		if len(o) != len(ms) {
			t.Fatalf("expected %d members, got %d", len(ms), len(o))
		}
		first[o[0]]++
		for _, m := range o {
			if m == ms[0] {
				before++
				break
			}
			if m == ms[1] {
				break
			}
		}
	}
	if len(first) != len(ms) {
		t.Errorf("expected every member first some time, got %v", first)
	}
	if before == 0 || before == tries {
		t.Errorf("expected both orders of two members, got one first %d times of %d", before, tries)
	}

	// Down members last, soonest back first.
	ms[0].Failed(now, time.Minute)
	ms[2].Failed(now, time.Second)
	for range 20 {
		o := s.Order(now, dst)
		if o[2] != ms[2] || o[3] != ms[0] {
			t.Fatalf("expected the down members last (%s, %s), got %s, %s", ms[2].Addr, ms[0].Addr, o[2].Addr, o[3].Addr)
		}
	}
	// ... until their down period ends.
	if o := s.Order(now.Add(2*time.Second), dst); o[3] != ms[0] {
		t.Errorf("expected %s last, got %s", ms[0].Addr, o[3].Addr)
	}

	if a := testing.AllocsPerRun(100, func() { s.Order(now, dst) }); a != 0 {
		t.Errorf("expected no allocation, got %v", a)
	}
}

func TestShardExchangeFailover(t *testing.T) {
	silent, good := startTarget(t, targetSilent), startTarget(t, targetAnswer)
	const downFor = 100 * time.Millisecond
	s := &Shard{Name: "failover", Members: []*Member{
		targetMember(t, "failover", silent, 50*time.Millisecond),
		targetMember(t, "failover", good, time.Second),
	}}
	dead := s.Members[0]

	// Exchanges until the silent member was tried first: it fails over.
	for i := 0; i < 50 && silent.other.Load() == 0; i++ {
		resp, m, err := s.Exchange(context.Background(), targetQuery(uint16(i)), downFor)
		if err != nil || m != s.Members[1] || resp.Id != uint16(i) || len(resp.Answer) != 1 {
			t.Fatalf("expected the answer of %s, got %v from %v, %v", good.addr, resp, m, err)
		}
	}
	if silent.other.Load() == 0 {
		t.Fatal("expected the silent member tried")
	}
	if !dead.Down(time.Now()) {
		t.Fatal("expected the silent member down")
	}
	if got := memberMetric(failoverCount.WithLabelValues("failover")); got < 1 {
		t.Errorf("expected failovers_total ≥ 1, got %v", got)
	}

	// While down, it gets no query.
	n := silent.other.Load()
	for i := 0; i < 20 && dead.Down(time.Now()); i++ {
		if _, m, err := s.Exchange(context.Background(), targetQuery(1), downFor); err != nil || m == dead {
			t.Fatalf("expected the answer of %s, got %v, %v", good.addr, m, err)
		}
	}
	if got := silent.other.Load(); got != n {
		t.Errorf("expected no query to the down member, got %d", got-n)
	}

	// Once down_for passed, it is tried again (and fails again).
	for i := 0; i < 100 && dead.Down(time.Now()); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 50 && silent.other.Load() == n; i++ {
		s.Exchange(context.Background(), targetQuery(1), downFor)
	}
	if silent.other.Load() == n {
		t.Errorf("expected the member tried again after down_for")
	}
	if !dead.Down(time.Now()) {
		t.Errorf("expected the member down again")
	}
}

func TestShardExchangeServfail(t *testing.T) {
	bad, good := startTarget(t, targetServfail), startTarget(t, targetAnswer)
	s := &Shard{Name: "servfail", Members: []*Member{
		targetMember(t, "servfail", bad, time.Second),
		targetMember(t, "servfail", good, time.Second),
	}}
	for i := 0; i < 50 && bad.other.Load() == 0; i++ {
		resp, m, err := s.Exchange(context.Background(), targetQuery(1), time.Minute)
		if err != nil || m != s.Members[1] || resp.Rcode != dns.RcodeSuccess {
			t.Fatalf("expected the answer of %s, got %v from %v, %v", good.addr, resp, m, err)
		}
	}
	if bad.other.Load() == 0 || !s.Members[0].Down(time.Now()) {
		t.Errorf("expected the SERVFAIL member tried and down")
	}

	// Only SERVFAIL: that is the answer.
	s = &Shard{Name: "servfail-only", Members: []*Member{targetMember(t, "servfail-only", bad, time.Second)}}
	resp, m, err := s.Exchange(context.Background(), targetQuery(9), time.Minute)
	if err != nil || m != s.Members[0] || resp.Rcode != dns.RcodeServerFailure || resp.Id != 9 {
		t.Errorf("expected SERVFAIL from %s, got %v from %v, %v", bad.addr, resp, m, err)
	}
}

// TestShardExchangeStale: when no member of a shard can confirm its state
// is current (no leader), a routed query is asked again allowing a stale
// answer; a query that is not routed gets the SERVFAIL.
func TestShardExchangeStale(t *testing.T) {
	a, b := startTarget(t, targetNotCurrent), startTarget(t, targetNotCurrent)
	s := &Shard{Name: "stale", Members: []*Member{
		targetMember(t, "stale", a, time.Second),
		targetMember(t, "stale", b, time.Second),
	}}
	before := memberMetric(staleAnswers.WithLabelValues("stale"))
	req := targetQuery(3)
	req.SetEdns0(1232, false)
	shardproto.RequestFresh(req)
	resp, m, err := s.Exchange(context.Background(), req, time.Minute)
	if err != nil || m == nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Fatalf("expected a stale answer, got %v from %v, %v", resp, m, err)
	}
	if shardproto.StaleAllowed(req) {
		t.Error("the caller's query was modified")
	}
	if got := memberMetric(staleAnswers.WithLabelValues("stale")) - before; got != 1 {
		t.Errorf("expected stale_answers_total up by 1, got %v", got)
	}
	resp, _, err = s.Exchange(context.Background(), targetQuery(4), time.Minute)
	if err != nil || resp.Rcode != dns.RcodeServerFailure {
		t.Errorf("expected SERVFAIL for a query that is not routed, got %v, %v", resp, err)
	}
}

// TestShardExchangeHeld: a member whose answer says a transaction holds
// the name is alive (not marked down), the next member is asked (it may
// have applied the decision), and when every member answers so the router
// asks again until the transaction is over.
func TestShardExchangeHeld(t *testing.T) {
	q := func(id uint16) *dns.Msg { // routed queries carry EDNS0 (the EDE)
		m := targetQuery(id)
		m.SetEdns0(1232, false)
		return m
	}
	first, other := startTarget(t, targetHeld), startTarget(t, targetAnswer)
	s := &Shard{Name: "held", Members: []*Member{
		targetMember(t, "held", first, time.Second),
		targetMember(t, "held", other, time.Second),
	}}
	s.Members[1].Failed(time.Now(), time.Minute) // tried last
	resp, m, err := s.Exchange(context.Background(), q(5), time.Minute)
	if err != nil || m != s.Members[1] || resp.Rcode != dns.RcodeSuccess || s.Members[0].Down(time.Now()) || first.other.Load() != 1 {
		t.Fatalf("expected the answer of the second member, the first asked once and kept alive; got %v from %v, %v", resp, m, err)
	}

	both := []*target{startTarget(t, targetHeld), startTarget(t, targetHeld)}
	s = &Shard{Name: "held", Members: []*Member{
		targetMember(t, "held", both[0], time.Second),
		targetMember(t, "held", both[1], time.Second),
	}}
	resp, _, err = s.Exchange(context.Background(), q(6), time.Minute)
	if err != nil || resp.Rcode != dns.RcodeServerFailure || !held(resp) || s.Members[0].Down(time.Now()) || s.Members[1].Down(time.Now()) {
		t.Fatalf("expected Held with both members asked and kept alive, got %v, %v", resp, err)
	}
	c := &Craftroute{cfg: config{downFor: time.Minute}}
	before := memberMetric(heldRetries)
	resp, err = c.exchange(context.Background(), s, q(7), true)
	if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Fatalf("expected the answer once the name is no longer held, got %v, %v", resp, err)
	}
	if got := memberMetric(heldRetries) - before; got < 1 {
		t.Errorf("expected held_retries_total up, got %v", got)
	}
}

func TestShardExchangeNoAnswer(t *testing.T) {
	silent := startTarget(t, targetSilent)
	s := &Shard{Name: "noanswer", Members: []*Member{
		targetMember(t, "noanswer", silent, 20*time.Millisecond),
		targetMember(t, "noanswer", silent, 20*time.Millisecond),
	}}
	if resp, m, err := s.Exchange(context.Background(), targetQuery(1), time.Minute); err == nil {
		t.Errorf("expected an error, got %v from %v", resp, m)
	}
	if silent.other.Load() != 2 {
		t.Errorf("expected both members tried, got %d queries", silent.other.Load())
	}

	// The context ends first: an error, and the members are not blamed.
	s = &Shard{Name: "noanswer-ctx", Members: []*Member{
		targetMember(t, "noanswer-ctx", silent, time.Minute),
		targetMember(t, "noanswer-ctx", silent, time.Minute),
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := s.Exchange(ctx, targetQuery(1), time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("expected %v, got %v", context.DeadlineExceeded, err)
	}
	for _, m := range s.Members {
		if m.Down(time.Now()) {
			t.Errorf("expected %s not marked down", m.Addr)
		}
	}

	if _, _, err := (&Shard{Name: "empty"}).Exchange(context.Background(), targetQuery(1), time.Minute); err == nil {
		t.Errorf("expected an error for a shard without members")
	}
}

func BenchmarkShardExchange(b *testing.B) {
	f := startTarget(b, targetAnswer)
	s := &Shard{Name: "bench", Members: []*Member{
		newMember("bench", f.addr, time.Second, nil),
		newMember("bench", f.addr, time.Second, nil),
	}}
	for _, m := range s.Members {
		m.start()
		defer m.stop()
	}
	req := targetQuery(1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Exchange(ctx, req, time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLeaseRefusedByStoppingMember: a member that refuses a lease request
// with Not Ready (it is stopping: craftstore's leases.stop) is down for
// the router's writes and queries; one that answers without a grant (no
// router_key) is not.
func TestLeaseRefusedByStoppingMember(t *testing.T) {
	stopping, plain := startTarget(t, targetNotCurrent), startTarget(t, targetAnswer)
	s := &Shard{Name: "a", Members: []*Member{
		targetMember(t, "a", stopping, time.Second),
		targetMember(t, "a", plain, time.Second),
	}}
	c := &Craftroute{cfg: config{key: keyName, downFor: time.Minute}}
	c.route(t, s)
	c.leases.key, c.leases.port, c.leases.qname = testKey, 53, "example.org."
	c.leases.until = map[*Member]time.Time{}
	c.leases.follow(c.shards())
	c.renewLeases(context.Background())
	if stopping.soa.Load() == 0 || plain.soa.Load() == 0 {
		t.Fatalf("lease requests: %d and %d, expected one to each member", stopping.soa.Load(), plain.soa.Load())
	}
	now := time.Now()
	if !s.Members[0].Down(now) {
		t.Error("a member that refused its lease with Not Ready is not down")
	}
	if s.Members[1].Down(now) {
		t.Error("a member that granted no lease (a plain answer) is down")
	}
	if order := s.Order(now, nil); order[0] != s.Members[1] {
		t.Errorf("the stopping member is first in the order of liveness")
	}
}
