package craftstore

import (
	"context"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// TestServeNotReady: a member that is not ready (here one of three whose
// peers never answer: it never knows a leader) answers craftroute's queries
// SERVFAIL with the Extended DNS Error "Not Ready", and plain queries from
// its state with stale serve (here REFUSED: it holds no zone yet) or with
// that SERVFAIL too with stale refuse.
func TestServeNotReady(t *testing.T) {
	rep, err := replica.Open(replica.Config{ID: 1, Dir: t.TempDir(), RaftAddr: "127.0.0.1:0",
		Peers: []replica.Member{{ID: 1, Raft: "127.0.0.1:0"}, {ID: 2, Raft: "127.0.0.1:1"}, {ID: 3, Raft: "127.0.0.1:2"}},
		Tick:  10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close() })
	if rep.Ready() {
		t.Fatal("expected a member without a leader not ready")
	}
	for _, tc := range []struct {
		stale  string
		routed bool
		rcode  int
		ede    bool
	}{
		{"serve", false, dns.RcodeRefused, false},
		{"serve", true, dns.RcodeServerFailure, true},
		{"refuse", false, dns.RcodeServerFailure, true},
		{"refuse", true, dns.RcodeServerFailure, true},
	} {
		cs := &Craftstore{Zones: []string{"org."}, cfg: config{id: 1, stale: tc.stale}}
		cs.rep.Store(rep)
		r := new(dns.Msg)
		r.SetQuestion("www.example.org.", dns.TypeA)
		r.SetEdns0(1232, false)
		if tc.routed {
			shardproto.RequestFresh(r)
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if _, err := cs.ServeDNS(context.Background(), rec, r); err != nil {
			t.Fatalf("stale %s, routed %v: %v", tc.stale, tc.routed, err)
		}
		m := rec.Msg
		gotEDE := false
		if opt := m.IsEdns0(); opt != nil {
			for _, o := range opt.Option {
				if e, ok := o.(*dns.EDNS0_EDE); ok && e.InfoCode == dns.ExtendedErrorCodeNotReady {
					gotEDE = true
				}
			}
		}
		if m.Rcode != tc.rcode || gotEDE != tc.ede {
			t.Errorf("stale %s, routed %v: expected %s (EDE Not Ready %v), got %s (%v)", tc.stale, tc.routed,
				dns.RcodeToString[tc.rcode], tc.ede, dns.RcodeToString[m.Rcode], gotEDE)
		}
	}
}
