package integration

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/ede"

	"github.com/miekg/dns"
)

// Two routers in front of the same shards must answer as one server would,
// whichever of them a client asks, right after a write made through the
// other one or directly on a shard (issue 27).

// twoRouters starts two shards of three members and two routers in key
// mode key, both serving ".", and one unsharded member as the reference.
func twoRouters(t *testing.T, key string) (s *sharded, ref string, refAPI harness.API) {
	wd := harness.Workdir(t)
	spec := routerSpec{zones: []string{"."}, key: key, transfer: true}
	s = startSharded(t, wd, 2, 3, []string{"."}, spec, spec)
	ref, refAPI = startSingle(t, wd, []string{"."})
	return s, ref, refAPI
}

// cycleParent is the zone above the cycles' zones: its wildcard answers
// for the names of a child zone once that zone is deleted.
const cycleParent = `$ORIGIN cycle.test.
$TTL 300
@ SOA ns1 hostmaster 1 7200 3600 1209600 60
@ NS ns1
ns1 A 192.0.2.53
* A 203.0.113.99
`

// cycleZone is a zone with a delegation (and glue), a wildcard, an empty
// non-terminal and a CNAME.
func cycleZone(origin string) string {
	return fmt.Sprintf(`$ORIGIN %s
$TTL 300
@ SOA ns1 hostmaster 1 7200 3600 1209600 60
@ NS ns1
ns1 A 192.0.2.53
www A 192.0.2.10
cname CNAME www
sub NS ns.sub
ns.sub A 192.0.2.54
*.wild A 192.0.2.20
host.ent A 192.0.2.30
`, origin)
}

// cycleQueries are the questions asked about zone origin.
func cycleQueries(origin string) []dnsdiff.Query {
	q := func(name string, t uint16) dnsdiff.Query { return dnsdiff.Query{Name: name + origin, Type: t} }
	return []dnsdiff.Query{
		q("", dns.TypeSOA), q("", dns.TypeNS), q("www.", dns.TypeA), q("cname.", dns.TypeA),
		q("sub.", dns.TypeNS), q("x.sub.", dns.TypeA), q("a.wild.", dns.TypeA), q("ent.", dns.TypeA),
		q("host.ent.", dns.TypeAAAA), q("nx.", dns.TypeA), q("www.", dns.TypeTXT),
	}
}

// TestRoutersZoneCycles: zones are created and deleted through one router,
// alternating, and asked through the other right after each PUT and DELETE
// returns; every answer must equal that of one member holding the same
// zones. Deleted zones must stop shadowing their parent at once (its
// wildcard answers), also for names the other router had cached negative
// answers for.
func TestRoutersZoneCycles(t *testing.T) {
	for _, key := range []string{"name", "zone"} {
		t.Run(key, func(t *testing.T) {
			s, ref, refAPI := twoRouters(t, key)
			putZone(t, refAPI, "cycle.test.", cycleParent)
			putZone(t, s.routers[0].client(), "cycle.test.", cycleParent)

			deadline := time.Now().Add(25 * time.Second)
			var asked, equal int
			var report []string
			check := func(phase string, r *router, qs []dnsdiff.Query) {
				for _, q := range qs {
					want, errW := exchangeFull(ref, q)
					got, errG := exchangeFull(r.addr(), q)
					asked++
					why, d, _ := diffMsg(want, errW, got, errG, true)
					if why == "" {
						equal++
					} else if len(report) < 10 {
						report = append(report, fmt.Sprintf(";; %s, %s via %s: %s differ\n%s", phase, q, r.name, why, d))
					}
				}
			}
			cycles := 0
			for i := 0; i < 300 && time.Now().Before(deadline); i++ {
				origin := fmt.Sprintf("z%d.cycle.test.", i)
				writer, reader := s.routers[i%2], s.routers[(i+1)%2]
				qs := cycleQueries(origin)
				putZone(t, refAPI, origin, cycleZone(origin))
				putZone(t, writer.client(), origin, cycleZone(origin))
				check("after PUT", reader, qs)
				check("after PUT", writer, qs[len(qs)-3:]) // the negative ones, cached by the writer
				for _, a := range []harness.API{refAPI, writer.client()} {
					if code, err := a.Do("DELETE", "/v1/zones/"+origin, nil, nil); err != nil || code != http.StatusOK {
						t.Fatalf("DELETE %s at %s: %d %v", origin, a.Base, code, err)
					}
				}
				check("after DELETE", reader, qs)
				cycles++
			}
			t.Logf("key mode %s: %d cycles, %d answers, %d equal to the single member's (%.2f%%)",
				key, cycles, asked, equal, 100*float64(equal)/float64(max(asked, 1)))
			if equal != asked {
				t.Errorf("%d of %d answers differ from the single member's; the first:\n%s", asked-equal, asked, strings.Join(report, "\n"))
			}
		})
	}
}

// TestRoutersWriteRead: a name is asked through one router (a negative
// answer, which that router may cache), then written through the other
// router, directly on a member of the shard that holds it, or with an RFC
// 2136 UPDATE through the other router, and asked again through the first
// right after the write returns: it must be there. Then it is deleted the
// same way and must be gone.
func TestRoutersWriteRead(t *testing.T) {
	for _, key := range []string{"name", "zone"} {
		t.Run(key, func(t *testing.T) {
			s, _, _ := twoRouters(t, key)
			const origin = "rw.test."
			putZone(t, s.routers[0].client(), origin, smallZone(origin, 3))
			reader, writer := s.routers[0], s.routers[1]

			// owner is a member of the shard that holds name, by the
			// writer's ring.
			owner := func(name string) *shardMember {
				var out struct{ Owner string }
				if code, err := writer.client().Do("GET", "/v1/shards?name="+name, nil, &out); err != nil || code != http.StatusOK || out.Owner == "" {
					t.Fatalf("GET /v1/shards?name=%s: %d %v %q", name, code, err, out.Owner)
				}
				ms := s.members[out.Owner]
				return ms[rand.IntN(len(ms))]
			}
			write := func(how, name string, add bool) {
				rr := name + " 60 IN A 192.0.2.77"
				body := map[string]any{"add": []string{rr}}
				if !add {
					body = map[string]any{"delete": []any{map[string]string{"name": name}}}
				}
				switch how {
				case "router":
					if code, err := writer.client().Do("POST", "/v1/zones/"+origin+"/records", body, nil); err != nil || code != http.StatusOK {
						t.Fatalf("POST through %s: %d %v", writer.name, code, err)
					}
				case "shard":
					m := owner(name)
					if code, err := m.client().Do("POST", "/v1/zones/"+origin+"/records", body, nil); err != nil || code != http.StatusOK {
						t.Fatalf("POST to %s: %d %v", m.name, code, err)
					}
				case "update":
					u := new(dns.Msg)
					u.SetUpdate(origin)
					r := mustRR(t, rr)
					if add {
						u.Insert([]dns.RR{r})
					} else {
						u.RemoveName([]dns.RR{r})
					}
					resp, err := exchangeUpdate(u, "udp", writer.addr())
					if err != nil || resp.Rcode != dns.RcodeSuccess {
						t.Fatalf("UPDATE through %s: %v %v", writer.name, resp, err)
					}
				}
			}
			has := func(name string) (bool, string) {
				r, err := harness.Query(reader.addr(), name, dns.TypeA)
				if err != nil {
					return false, err.Error()
				}
				return r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1, dns.RcodeToString[r.Rcode]
			}
			deadline := time.Now().Add(20 * time.Second)
			var rounds, stale int
			var report []string
			for i := 0; i < 150 && time.Now().Before(deadline); i++ {
				how := []string{"router", "shard", "update"}[i%3]
				name := fmt.Sprintf("n%d.%s", i, origin)
				if ok, rc := has(name); ok {
					t.Fatalf("%s exists before it was written (%s)", name, rc)
				}
				write(how, name, true)
				if ok, rc := has(name); !ok {
					stale++
					report = append(report, fmt.Sprintf("%s written (%s), then %s through %s", name, how, rc, reader.name))
				}
				write(how, name, false)
				if ok, _ := has(name); ok {
					stale++
					report = append(report, fmt.Sprintf("%s deleted (%s), then still answered through %s", name, how, reader.name))
				}
				rounds++
			}
			if key == "name" {
				// A client's write to a member of a name its shard does
				// not hold alone: refused, nothing written.
				name := "wrong." + origin
				own := owner(name).shard
				var other *shardMember
				for sh, ms := range s.members {
					if sh != own {
						other = ms[0]
					}
				}
				for _, w := range []struct{ rr, want string }{
					{name + " 60 IN A 192.0.2.66", `placed on shard "` + own + `"`},
					{origin + " 60 IN TXT apex", "held by every shard"},
				} {
					var out struct{ Error string }
					code, err := other.client().Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": []string{w.rr}}, &out)
					if err != nil || code != http.StatusConflict || !strings.Contains(out.Error, w.want) {
						t.Errorf("%s written to %s, of shard %s: %d %v %q; want 409 saying %q", w.rr, other.name, other.shard, code, err, out.Error, w.want)
					}
				}
				u := new(dns.Msg)
				u.SetUpdate(origin)
				u.Insert([]dns.RR{mustRR(t, name+" 60 IN A 192.0.2.66")})
				u.SetEdns0(1232, false)
				resp, err := exchangeUpdate(u, "udp", other.addr())
				if err != nil || resp.Rcode != dns.RcodeRefused || ede.Of(resp) == nil || ede.Of(resp).InfoCode != dns.ExtendedErrorCodeNotAuthoritative {
					t.Errorf("UPDATE of %s sent to %s, of shard %s: %v %v; want REFUSED, Extended DNS Error Not Authoritative", name, other.name, other.shard, resp, err)
				}
				if ok, rc := has(name); ok {
					t.Errorf("%s answered through %s after refused writes (%s)", name, reader.name, rc)
				}
			}
			t.Logf("key mode %s: %d names written and deleted, %d stale answers", key, rounds, stale)
			if stale > 0 {
				t.Errorf("%d stale answers through %s; the first: %s", stale, reader.name, strings.Join(report[:min(len(report), 5)], "; "))
			}
		})
	}
}

// TestRoutersLeaseLapse: while a member is down, the routers hold no lease
// on it (coredns_craftroute_leases_valid 0): their negative caches are off
// and their queries confirm state with the leader, so a name written through
// one router is still answered by the other at once; once the member is
// back, the leases hold again.
func TestRoutersLeaseLapse(t *testing.T) {
	s, _, _ := twoRouters(t, "name")
	const origin = "lapse.test."
	putZone(t, s.routers[0].client(), origin, smallZone(origin, 3))
	reader, writer := s.routers[0], s.routers[1]
	valid := func() float64 {
		return metricSum(t, routerMetrics(t, reader), "coredns_craftroute_leases_valid")
	}
	harness.Eventually(t, "the leases held", 10*time.Second, func() bool { return valid() == 1 })

	down := s.members["a"][0]
	down.p.Kill()
	harness.Eventually(t, "the leases lapsed", 10*time.Second, func() bool { return valid() == 0 })
	for i := range 20 {
		name := fmt.Sprintf("l%d.%s", i, origin)
		if r, err := harness.Query(reader.addr(), name, dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
			t.Fatalf("expected NXDOMAIN for %s before its write, got %v %v", name, r, err)
		}
		if code, err := writer.client().Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.9"}}, nil); err != nil || code != http.StatusOK {
			t.Fatalf("POST through %s: %d %v", writer.name, code, err)
		}
		if !harness.HasA(reader.addr(), name, "192.0.2.9") {
			t.Errorf("%s written through %s is missing through %s while the leases lapsed", name, writer.name, reader.name)
		}
	}
	down.p.Restart()
	harness.Eventually(t, "the leases held again", 20*time.Second, func() bool { return valid() == 1 })
}
