package craftstore

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/zoneapi"
)

// TestChecker runs a member's health checker against an HTTP service
// whose health the test sets: the leader commits each change of state as
// the name's health record, and the answers follow it.
func TestChecker(t *testing.T) {
	a, rep := newAPI(t, "")
	rrs, err := zoneapi.ParseZone("example.org.", apiZone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rep.PutZone(context.Background(), "example.org.", rrs, false); err != nil {
		t.Fatal(err)
	}
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" || r.Host != "svc.example" || !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	body := fmt.Sprintf(`{"pools": {"main": {"values": [{"value": "127.0.0.1"}], "fallback": "backup"}, "backup": {"values": [{"value": "192.0.2.99", "status": "up"}]}},
		"rules": [{"pool": "main"}],
		"check": {"protocol": "http", "port": %d, "path": "/health", "host": "svc.example", "interval": "500ms", "timeout": "400ms", "rise": 2, "fall": 1}}`, port)
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.org/policies/www/A", body); code != 200 {
		t.Fatalf("PUT policy: %d %s", code, raw)
	}
	cs := &Craftstore{Zones: []string{"org."}}
	cs.rep.Store(rep)
	ck := &checker{rep: rep, member: "1", results: make(chan probeResult, maxProbes), sem: make(chan struct{}, maxProbes), client: &http.Client{}}
	// answers runs the checker until www answers want, and counts rounds.
	answers := func(what, want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			ck.round(time.Now())
			select {
			case r := <-ck.results:
				ck.result(r)
				ck.commit()
			case <-time.After(checkTick):
			}
			m := ask(t, cs, "www.example.org.", "198.51.100.7", "")
			if len(m.Answer) == 1 && strings.Contains(m.Answer[0].String(), want) {
				return
			}
		}
		t.Fatalf("%s: www never answered %s", what, want)
	}
	answers("healthy", "127.0.0.1")
	healthy.Store(false)
	answers("failing (fall 1)", "192.0.2.99")
	h := policy.FindHealth(rep.Zone("example.org.").RRs("www.example.org.", policy.TypeHealth), 1)
	if down, _, err := policy.Down(h); err != nil || len(down) != 1 || down[0] != "127.0.0.1" {
		t.Fatalf("health record: expected 127.0.0.1 down, got %v %v", down, err)
	}
	healthy.Store(true)
	answers("healthy again (rise 2)", "127.0.0.1")
	if h := policy.FindHealth(rep.Zone("example.org.").RRs("www.example.org.", policy.TypeHealth), 1); h != nil {
		t.Errorf("every value up: expected no health record, got %v", h)
	}
}

func TestProbe(t *testing.T) {
	ck := &checker{client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/bad":
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	closed := netip.MustParseAddrPort(fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	for _, tc := range []struct {
		p    policy.Probe
		want bool
	}{
		{policy.Probe{Protocol: "tcp", Addr: ap, Timeout: time.Second}, true},
		{policy.Probe{Protocol: "tcp", Addr: closed, Timeout: time.Second}, false},
		{policy.Probe{Protocol: "http", Addr: ap, Path: "/", Timeout: time.Second}, true},
		{policy.Probe{Protocol: "http", Addr: ap, Path: "/redirect", Timeout: time.Second}, true},
		{policy.Probe{Protocol: "http", Addr: ap, Path: "/bad", Timeout: time.Second}, false},
		{policy.Probe{Protocol: "http", Addr: closed, Path: "/", Timeout: time.Second}, false},
	} {
		if got := ck.probe(tc.p); got != tc.want {
			t.Errorf("%s: expected %v, got %v", tc.p, tc.want, got)
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}
