package craftstore

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// testRouterKey is the routers' key of the tests' members.
var testRouterKey = shardproto.NewKey("0123456789abcdef0123456789abcdef")

// fakeRouter answers change notices on a UDP and TCP port of 127.0.0.1 (or
// not, when silent; unsigned, when forged) and counts them. Like CoreDNS's,
// its UDP server reads at most 512 bytes of a request.
type fakeRouter struct {
	port    uint16
	notices atomic.Int64
	names   atomic.Value // []string of the last notice
}

func startFakeRouter(t *testing.T, silent bool) *fakeRouter {
	return startRouter(t, silent, false)
}

func startRouter(t *testing.T, silent, unsigned bool) *fakeRouter {
	t.Helper()
	pc, ln := dnsdiff.ListenUDPTCP(t)
	f := &fakeRouter{port: uint16(pc.LocalAddr().(*net.UDPAddr).Port)}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		n, _, ok := shardproto.NoticeOf(r, testRouterKey)
		if !ok {
			return
		}
		f.notices.Add(1)
		f.names.Store(n.Names)
		if silent {
			return
		}
		m := new(dns.Msg)
		m.SetReply(r)
		if !unsigned {
			shardproto.AckNotice(m, n, testRouterKey)
		}
		w.WriteMsg(m)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	}
	return f
}

// leaseRequest is a lease request of f for d, asked at asked and signed
// with key.
func leaseRequest(f *fakeRouter, d time.Duration, asked time.Time, key *shardproto.Key) (*dns.Msg, shardproto.Lease) {
	req := new(dns.Msg)
	req.SetQuestion(".", dns.TypeSOA)
	l := shardproto.RequestLease(req, shardproto.Lease{Port: f.port, Duration: d, Token: [shardproto.TokenLen]byte{byte(f.port), byte(f.port >> 8)}, Time: asked}, key)
	return req, l
}

// routerAddr is where the tests' lease requests come from.
var routerAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}

// leaseFrom grants f a lease of d on l, as a query from 127.0.0.1 would.
func leaseFrom(t *testing.T, l *leases, f *fakeRouter, d time.Duration) {
	t.Helper()
	req, sent := leaseRequest(f, d, time.Now(), testRouterKey)
	resp := l.grant(routerAddr, req, 7)
	if idx, ok := shardproto.LeaseGranted(resp, sent, testRouterKey); !ok || idx != 7 {
		t.Fatalf("expected the grant of the lease request with index 7, got %v", resp)
	}
}

// TestLeaseGrant: only a request signed with the routers' key, near the
// member's clock and newer than its token's last one gets a lease; the
// leases are bounded.
func TestLeaseGrant(t *testing.T) {
	l := newLeases(time.Now(), true, testRouterKey)
	f := startFakeRouter(t, false)
	now := time.Now()
	for what, req := range map[string]func() *dns.Msg{
		"unsigned":    func() *dns.Msg { r, _ := leaseRequest(f, time.Second, now, nil); return r },
		"another key": func() *dns.Msg { r, _ := leaseRequest(f, time.Second, now, shardproto.NewKey("another key")); return r },
		"from the past": func() *dns.Msg {
			r, _ := leaseRequest(f, time.Second, now.Add(-shardproto.MaxSkew-time.Second), testRouterKey)
			return r
		},
		"from the future": func() *dns.Msg {
			r, _ := leaseRequest(f, time.Second, now.Add(shardproto.MaxSkew+time.Second), testRouterKey)
			return r
		},
	} {
		if m := l.grant(routerAddr, req(), 1); m != nil {
			t.Errorf("a request %s was granted", what)
		}
	}
	if len(l.holders) != 0 {
		t.Fatalf("refused requests left %d holders", len(l.holders))
	}
	req, _ := leaseRequest(f, time.Second, now, testRouterKey)
	if l.grant(routerAddr, req, 1) == nil {
		t.Fatal("a signed request was not granted")
	}
	// The same request again (a replay, from anywhere), or an older one.
	if l.grant(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 9}, req, 1) != nil {
		t.Error("a replayed request was granted")
	}
	if old, _ := leaseRequest(f, time.Second, now.Add(-time.Millisecond), testRouterKey); l.grant(routerAddr, old, 1) != nil {
		t.Error("an older request was granted")
	}
	if next, _ := leaseRequest(f, time.Second, now.Add(time.Millisecond), testRouterKey); l.grant(routerAddr, next, 1) == nil {
		t.Error("the router's next request was not granted")
	}
	// A lease of a member without the key: none.
	if none := newLeases(time.Now(), true, nil); none.grant(routerAddr, req, 1) != nil {
		t.Error("a member without a key granted a lease")
	}
	// At most maxHolders leases; an expired one makes room once its last
	// request is too old to be granted again.
	full := newLeases(time.Now(), true, testRouterKey)
	for i := range maxHolders {
		r := new(dns.Msg)
		r.SetQuestion(".", dns.TypeSOA)
		shardproto.RequestLease(r, shardproto.Lease{Port: 53, Duration: time.Second, Token: [shardproto.TokenLen]byte{byte(i), byte(i >> 8), 1}, Time: now}, testRouterKey)
		if full.grant(routerAddr, r, 1) == nil {
			t.Fatalf("lease %d of %d not granted", i, maxHolders)
		}
	}
	r, _ := leaseRequest(f, time.Second, now, testRouterKey)
	if full.grant(routerAddr, r, 1) != nil {
		t.Errorf("lease %d granted", maxHolders+1)
	}
	full.mu.Lock()
	for tok, h := range full.holders {
		h.until, h.lease.Time = now.Add(-time.Second), now.Add(-shardproto.MaxSkew-time.Second)
		full.holders[tok] = h
	}
	full.mu.Unlock()
	if full.grant(routerAddr, r, 1) == nil || len(full.holders) != 1 {
		t.Errorf("expired leases made no room: %d held", len(full.holders))
	}
}

// TestLeasesStopping: a stopping member refuses every lease request it
// would grant (SERVFAIL, Not Ready: the router sends it no more writes),
// and knows when every router holding a lease was told so.
func TestLeasesStopping(t *testing.T) {
	l := newLeases(time.Now(), true, testRouterKey)
	f, g := startFakeRouter(t, false), startFakeRouter(t, false)
	leaseFrom(t, l, f, 2*time.Second)
	leaseFrom(t, l, g, 2*time.Second)
	l.stop()
	if l.allTold() {
		t.Fatal("told before any router asked again")
	}
	refused := func(req *dns.Msg) {
		t.Helper()
		m := l.grant(routerAddr, req, 9)
		if m == nil || m.Rcode != dns.RcodeServerFailure || ede.Of(m) == nil || ede.Of(m).InfoCode != dns.ExtendedErrorCodeNotReady {
			t.Fatalf("a stopping member's answer to a lease request: %v, expected SERVFAIL with Not Ready", m)
		}
	}
	req, _ := leaseRequest(f, 2*time.Second, time.Now().Add(time.Millisecond), testRouterKey)
	refused(req)
	if m := l.grant(routerAddr, req, 9); m != nil {
		t.Errorf("a replay of a refused request was answered as a lease request: %v", m)
	}
	if l.allTold() {
		t.Fatal("told with one of two routers asked")
	}
	req, _ = leaseRequest(g, 2*time.Second, time.Now().Add(time.Millisecond), testRouterKey)
	refused(req)
	if !l.allTold() {
		t.Fatal("not told after both routers asked")
	}
	// Also after the leases were saved; an unsigned request is a plain query.
	if err := l.save(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	req, _ = leaseRequest(f, 2*time.Second, time.Now().Add(2*time.Millisecond), testRouterKey)
	refused(req)
	if unsigned, _ := leaseRequest(f, time.Second, time.Now().Add(3*time.Millisecond), nil); l.grant(routerAddr, unsigned, 9) != nil {
		t.Error("an unsigned lease request to a stopping member was answered as one")
	}
	// A router whose lease expired need not be told.
	e := newLeases(time.Now(), true, testRouterKey)
	leaseFrom(t, e, f, time.Millisecond)
	e.stop()
	time.Sleep(5 * time.Millisecond)
	if !e.allTold() {
		t.Error("an expired lease holds up the stop")
	}
}

func TestLeasesNotify(t *testing.T) {
	l := newLeases(time.Now(), true, testRouterKey)
	if missed := l.notify(context.Background(), shardproto.Notice{Zone: "example.org.", Change: shardproto.Records}); missed != nil {
		t.Fatalf("no leases, yet %v missed", missed)
	}
	f := startFakeRouter(t, false)
	leaseFrom(t, l, f, 2*time.Second)
	missed := l.notify(context.Background(), shardproto.Notice{Zone: "example.org.", Change: shardproto.Records, Names: []string{"www.example.org."}})
	if missed != nil || f.notices.Load() != 1 {
		t.Fatalf("expected one answered notice, got %d, missed %v", f.notices.Load(), missed)
	}
	if names, _ := f.names.Load().([]string); len(names) != 1 || names[0] != "www.example.org." {
		t.Errorf("expected the notice to name www.example.org., got %v", names)
	}

	// A notice of many names (each shard's part of an UPDATE of 50 names,
	// as external-dns sends them) is too large for a UDP request: it goes
	// over TCP, at once.
	var many []string
	for i := 0; i < 30; i++ {
		many = append(many, "a-host-"+strconv.Itoa(i)+".example.org.")
	}
	start := time.Now()
	missed = l.notify(context.Background(), shardproto.Notice{Zone: "example.org.", Change: shardproto.Records, Names: many})
	if names, _ := f.names.Load().([]string); missed != nil || len(names) != 30 || time.Since(start) > time.Second {
		t.Fatalf("a notice of 30 names: expected it answered at once, got %d names, missed %v, after %v", len(names), missed, time.Since(start))
	}

	// A router that does not answer holds the write until its lease expires.
	s := startFakeRouter(t, true)
	leaseFrom(t, l, s, 300*time.Millisecond)
	start = time.Now()
	missed = l.notify(context.Background(), shardproto.Notice{Zone: "example.org.", Change: shardproto.ZoneDeleted})
	if len(missed) != 1 || missed[0] != net.JoinHostPort("127.0.0.1", strconv.Itoa(int(s.port))) {
		t.Fatalf("expected the silent router missed, got %v", missed)
	}
	if s.notices.Load() < 2 {
		t.Errorf("expected the notice sent again while the lease lasted, got %d tries", s.notices.Load())
	}
	t.Logf("a silent router held the write %v (its lease: 300ms)", time.Since(start).Round(time.Millisecond))
	// A NOERROR that is not the router's (unsigned) holds the write too.
	u := startRouter(t, false, true)
	leaseFrom(t, l, u, 300*time.Millisecond)
	if missed := l.notify(context.Background(), shardproto.Notice{Zone: "example.org.", Change: shardproto.Records}); len(missed) != 1 || missed[0] != net.JoinHostPort("127.0.0.1", strconv.Itoa(int(u.port))) || u.notices.Load() < 2 {
		t.Fatalf("expected the router answering unsigned missed, got %v after %d tries", missed, u.notices.Load())
	}
	// Once expired, it is no longer notified.
	before := s.notices.Load()
	l.notify(context.Background(), shardproto.Notice{Zone: "example.org.", Change: shardproto.Records})
	if s.notices.Load() != before {
		t.Error("a router whose lease expired was notified")
	}
}

// TestLeasesAfterRestart: a member that restarted with its data may have
// granted leases in its previous run: it acknowledges no write before the
// longest lease could have expired.
func TestLeasesAfterRestart(t *testing.T) {
	started := time.Now().Add(-shardproto.MaxLease + 200*time.Millisecond)
	l := newLeases(started, false, testRouterKey)
	l.notify(context.Background(), shardproto.Notice{Zone: "example.org.", Change: shardproto.Records})
	if time.Now().Before(started.Add(shardproto.MaxLease)) {
		t.Errorf("a notice returned before MaxLease after the start")
	}
}

// TestLeasesSavedOnStop: a member that stops cleanly saves its leases and
// its next run takes them over: it notifies the routers that hold them and
// acknowledges writes at once. The file is gone once read, so a run that
// crashes (leaves none) makes the next one wait; a damaged file does too.
func TestLeasesSavedOnStop(t *testing.T) {
	dir := t.TempDir()
	l := newLeases(time.Now(), true, testRouterKey)
	f := startFakeRouter(t, false)
	leaseFrom(t, l, f, 2*time.Second)
	if err := l.save(dir); err != nil {
		t.Fatal(err)
	}
	// Stopping, the member grants no more leases.
	req, _ := leaseRequest(f, time.Second, time.Now().Add(time.Millisecond), testRouterKey)
	if m := l.grant(routerAddr, req, 1); m != nil {
		t.Errorf("a member that saved its leases granted another: %v", m)
	}

	next := loadLeases(dir, time.Now(), false, testRouterKey)
	start := time.Now()
	missed := next.notify(context.Background(), shardproto.Notice{Zone: "example.org.", Change: shardproto.Records, Names: []string{"www.example.org."}})
	if took := time.Since(start); missed != nil || f.notices.Load() != 1 || took >= shardproto.MaxLease/2 {
		t.Errorf("expected the saved lease notified at once, got %d notices, missed %v, after %v", f.notices.Load(), missed, took)
	}
	if _, err := os.Stat(filepath.Join(dir, leasesFile)); !os.IsNotExist(err) {
		t.Errorf("the leases file is still there after the start: %v", err)
	}

	// The run after a crash finds no file and waits.
	if after := loadLeases(dir, time.Now(), false, testRouterKey); !after.started.After(time.Now().Add(-time.Second)) {
		t.Errorf("a run after a crash does not wait for the leases of the one before")
	}
	if err := os.WriteFile(filepath.Join(dir, leasesFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if damaged := loadLeases(dir, time.Now(), false, testRouterKey); !damaged.started.After(time.Now().Add(-time.Second)) || len(damaged.holders) != 0 {
		t.Errorf("a damaged leases file was trusted")
	}
}
