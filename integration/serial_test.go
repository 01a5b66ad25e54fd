package integration

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// TestRoutersOneSerial: in key mode "name" every shard keeps its own SOA
// serial; both routers present one zone serial that rises by one with
// every change on any shard (through a router, on a member, by UPDATE),
// in SOA answers and in negative answers alike, the same through both, and
// never goes back when a router or a member restarts, nor while a member is
// down (the routers then hold no lease and ask every shard) (issue 28).
func TestRoutersOneSerial(t *testing.T) {
	s, _, _ := twoRouters(t, "name")
	const origin = "serial.test."
	putZone(t, s.routers[0].client(), origin, smallZone(origin, 8))

	// serials returns the serial every router presents in an SOA answer and
	// in an NXDOMAIN answer; all must agree.
	serial := func(what string) uint32 {
		t.Helper()
		var got []uint32
		for _, r := range s.routers {
			for _, q := range []struct {
				name  string
				qtype uint16
			}{{origin, dns.TypeSOA}, {"nx." + origin, dns.TypeA}} {
				m, err := harness.Query(r.addr(), q.name, q.qtype)
				if err != nil {
					t.Fatalf("%s: %s %s through %s: %v", what, q.name, dns.TypeToString[q.qtype], r.name, err)
				}
				found := false
				for _, rr := range append(m.Answer, m.Ns...) {
					if soa, ok := rr.(*dns.SOA); ok {
						got, found = append(got, soa.Serial), true
					}
				}
				if !found {
					t.Fatalf("%s: no SOA in the answer to %s %s through %s: %v", what, q.name, dns.TypeToString[q.qtype], r.name, m)
				}
			}
		}
		for _, g := range got[1:] {
			if g != got[0] {
				t.Fatalf("%s: the routers present different serials: %v", what, got)
			}
		}
		return got[0]
	}
	owner := func(name string) string {
		var out struct{ Owner string }
		if code, err := s.routers[0].client().Do("GET", "/v1/shards?name="+name, nil, &out); err != nil || code != http.StatusOK || out.Owner == "" {
			t.Fatalf("GET /v1/shards?name=%s: %d %v %q", name, code, err, out.Owner)
		}
		return out.Owner
	}
	cur := serial("after the import")
	if cur != 1 {
		t.Errorf("expected the imported serial 1, got %d", cur)
	}
	perShard := map[string]int{}
	var down *shardMember // a member that is down, not written to
	write := func(i int, how string) {
		t.Helper()
		name := fmt.Sprintf("w%d.%s", i, origin)
		rr := name + " 60 IN A 192.0.2.7"
		body := map[string]any{"add": []string{rr}}
		switch how {
		case "router":
			r := s.routers[i%2]
			if code, err := r.client().Do("POST", "/v1/zones/"+origin+"/records", body, nil); err != nil || code != http.StatusOK {
				t.Fatalf("POST %s through %s: %d %v", name, r.name, code, err)
			}
		case "member":
			ms := s.members[owner(name)]
			m := ms[rand.IntN(len(ms))]
			for m == down {
				m = ms[rand.IntN(len(ms))]
			}
			if code, err := m.client().Do("POST", "/v1/zones/"+origin+"/records", body, nil); err != nil || code != http.StatusOK {
				t.Fatalf("POST %s to %s: %d %v", name, m.name, code, err)
			}
		case "update":
			u := new(dns.Msg)
			u.SetUpdate(origin)
			u.Insert([]dns.RR{mustRR(t, rr)})
			r := s.routers[i%2]
			if resp, err := exchangeUpdate(u, "udp", r.addr()); err != nil || resp.Rcode != dns.RcodeSuccess {
				t.Fatalf("UPDATE %s through %s: %v %v", name, r.name, resp, err)
			}
		}
		perShard[owner(name)]++
		next := serial(fmt.Sprintf("after writing %s (%s)", name, how))
		if next != cur+1 {
			t.Errorf("after writing %s (%s) on shard %s: expected serial %d, got %d", name, how, owner(name), cur+1, next)
		}
		cur = next
	}
	for i := range 24 {
		write(i, []string{"router", "member", "update"}[i%3])
	}
	if len(perShard) < 2 {
		t.Fatalf("the writes landed on one shard only: %v", perShard)
	}
	t.Logf("24 writes (per shard %v): serial %d", perShard, cur)

	// The zone imported again with its old serial, and SOA records written
	// with an older and a newer serial, through the router's API: as one
	// server, the serial moves on by one, then takes the newer one.
	soa := func(serial int) string {
		return fmt.Sprintf("%s 300 IN SOA ns1.%s hostmaster.%s %d 7200 3600 1209600 60", origin, origin, origin, serial)
	}
	steps := []struct {
		what, method, path string
		body               any
		want               uint32
	}{
		{"an import with the old serial", "PUT", "/v1/zones/" + origin, smallZone(origin, 8), cur + 1},
		{"an SOA with an older serial", "POST", "/v1/zones/" + origin + "/records", map[string]any{"add": []string{soa(5)}}, cur + 2},
		{"an SOA with a newer serial", "POST", "/v1/zones/" + origin + "/records", map[string]any{"add": []string{soa(1000)}}, 1000},
	}
	for _, st := range steps {
		var out struct{ Serial uint32 }
		if code, err := s.routers[0].client().Do(st.method, st.path, st.body, &out); err != nil || code != http.StatusOK {
			t.Fatalf("%s: %d %v", st.what, code, err)
		}
		if out.Serial != st.want {
			t.Errorf("%s: the API answered serial %d, expected %d", st.what, out.Serial, st.want)
		}
		if got := serial(st.what); got != st.want {
			t.Errorf("%s: expected serial %d, got %d", st.what, st.want, got)
		}
		cur = st.want
	}
	write(100, "member")

	// A router that restarts presents the same serial at once.
	r := s.routers[1]
	r.p.Kill()
	r.p.Restart()
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", r.rdy), s.procs...)
	if got := serial("after a router restarted"); got != cur {
		t.Errorf("after a router restarted: expected serial %d, got %d", cur, got)
	}
	// So does every member, one after the other.
	for _, sh := range s.shards {
		m := s.members[sh][0]
		m.p.Kill()
		m.p.Restart()
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", m.ready), s.procs...)
	}
	if got := serial("after members restarted"); got != cur {
		t.Errorf("after members restarted: expected serial %d, got %d", cur, got)
	}
	// A member down: no leases; the serial still rises with every write.
	down = s.members["a"][1]
	down.p.Kill()
	harness.Eventually(t, "the leases lapsed", 10*time.Second, func() bool {
		return metricSum(t, routerMetrics(t, s.routers[0]), "coredns_craftroute_leases_valid") == 0
	})
	for i := 24; i < 30; i++ {
		write(i, []string{"router", "member", "update"}[i%3])
	}
	down.p.Restart()
}
