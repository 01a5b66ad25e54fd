package integration

import (
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// axfrIn transfers origin from addr with miekg's client.
func axfrIn(addr, origin string) ([]dns.RR, error) {
	tr := &dns.Transfer{DialTimeout: 5 * time.Second, ReadTimeout: 20 * time.Second}
	m := new(dns.Msg)
	m.SetAxfr(origin)
	ch, err := tr.In(m, addr)
	if err != nil {
		return nil, err
	}
	var rrs []dns.RR
	var failed error
	for env := range ch {
		if env.Error != nil && failed == nil {
			failed = env.Error
		}
		rrs = append(rrs, env.RR...)
	}
	return rrs, failed
}

// rrKey is rr's text with a lower-case owner, for comparing record sets.
func rrKey(rr dns.RR) string {
	rr = dns.Copy(rr)
	rr.Header().Name = strings.ToLower(rr.Header().Name)
	return rr.String()
}

// checkAXFR checks a full transfer of origin from addr: framed by the SOA
// with serial want, every record once, and the records of the zone as the
// router's API exports it (SOA serials aside).
func checkAXFR(t *testing.T, addr string, api harness.API, origin string, want uint32) []dns.RR {
	t.Helper()
	rrs, err := axfrIn(addr, origin)
	if err != nil || len(rrs) < 2 {
		t.Fatalf("AXFR of %s through %s: %v (%d records)", origin, addr, err, len(rrs))
	}
	if soaOf(rrs[0]) != want || soaOf(rrs[len(rrs)-1]) != want {
		t.Errorf("AXFR of %s through %s: expected it framed by SOA serial %d, got %v ... %v", origin, addr, want, rrs[0], rrs[len(rrs)-1])
	}
	got := map[string]int{}
	for _, rr := range rrs[1 : len(rrs)-1] {
		if rr.Header().Rrtype == dns.TypeSOA {
			t.Errorf("AXFR of %s: an SOA inside the transfer: %v", origin, rr)
			continue
		}
		got[rrKey(rr)]++
	}
	for k, n := range got {
		if n > 1 {
			t.Errorf("AXFR of %s through %s: %d copies of %s", origin, addr, n, k)
		}
	}
	var text string
	if code, err := api.Do("GET", "/v1/zones/"+origin, nil, &text); err != nil || code != http.StatusOK {
		t.Fatalf("GET the zone: %d %v", code, err)
	}
	exported := map[string]bool{}
	zp := dns.NewZoneParser(strings.NewReader(text), origin, "")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if rr.Header().Rrtype != dns.TypeSOA {
			exported[rrKey(rr)] = true
		}
	}
	if err := zp.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range exported {
		if got[k] == 0 {
			t.Errorf("AXFR of %s through %s: missing %s", origin, addr, k)
		}
	}
	for k := range got {
		if !exported[k] {
			t.Errorf("AXFR of %s through %s: %s is not in the zone", origin, addr, k)
		}
	}
	return rrs
}

// sameZone checks that the AXFRs of origin from a and b hold the same
// records, names compared case-insensitively (Knot lowers them) and TTLs
// aside (Knot gives every record of an RRset the same TTL).
func sameZone(t *testing.T, a, b, origin string) {
	t.Helper()
	za, errA := axfrIn(a, origin)
	zb, errB := axfrIn(b, origin)
	if errA != nil || errB != nil {
		t.Fatalf("AXFR of %s: from %s %v, from %s %v", origin, a, errA, b, errB)
	}
	keys := func(rrs []dns.RR) map[string]bool {
		m := map[string]bool{}
		for _, rr := range rrs {
			rr = dns.Copy(rr)
			rr.Header().Ttl = 0
			m[strings.ToLower(rr.String())] = true
		}
		return m
	}
	ka, kb := keys(za), keys(zb)
	for k := range ka {
		if !kb[k] {
			t.Errorf("%s has %s, %s does not", a, k, b)
		}
	}
	for k := range kb {
		if !ka[k] {
			t.Errorf("%s has %s, %s does not", b, k, a)
		}
	}
}

// TestRouterTransfers: zones spread over two shards of three members
// transfer through the routers like one server's, in key mode "name" (the
// shards' snapshots merged) and "zone" (the zone's shard passed on): AXFR
// has every record once, framed by the zone's serial; NSD as a secondary
// of each router takes the zone, follows changes by NOTIFY and IXFR, and
// answers like the router; IXFR from the current serial is the SOA, from
// an older one the changes since. AXFRs during cross-shard changes never
// show half of one.
func TestRouterTransfers(t *testing.T) {
	const (
		byName = "xname.example."
		byZone = "xzone.example."
	)
	wd := harness.Workdir(t)
	nsdName, nsdZone := harness.ListenPort(t), harness.ListenPort(t)
	knotName, knotZone := harness.ListenPort(t), harness.ListenPort(t)
	s := startSharded(t, wd, 2, 3, []string{byName, byZone},
		routerSpec{zones: []string{byName}, key: "name", notify: []int{nsdName, knotName}},
		routerSpec{zones: []string{byZone}, key: "zone", noMap: true, notify: []int{nsdZone, knotZone}})
	for i, tc := range []struct {
		origin    string
		nsd, knot int
	}{{byName, nsdName, knotName}, {byZone, nsdZone, knotZone}} {
		r := s.routers[i]
		t.Run(r.spec.key, func(t *testing.T) {
			origin := tc.origin
			text, queries := dnsdiff.GenerateZone(origin, 11, 300)
			putZone(t, r.client(), origin, text)
			first := soaSerial(r.addr(), origin)
			checkAXFR(t, r.addr(), r.client(), origin, first)

			sec := dnsdiff.StartNSDSecondary(t, origin, r.addr(), tc.nsd)
			if got := soaSerial(sec.Addr, origin); got != first {
				t.Fatalf("expected NSD at serial %d, got %d", first, got)
			}
			dnsdiff.Compare(t, sec.Addr, r.addr(), queries)
			knot := dnsdiff.StartKnotSecondary(t, origin, r.addr(), tc.knot)
			if got := soaSerial(knot.Addr, origin); got != first {
				t.Fatalf("expected Knot at serial %d, got %d", first, got)
			}

			// Changes through the router, one of them over both shards in
			// key mode "name": NSD follows by NOTIFY.
			changes := []string{
				`{"add":["xfr-a 300 IN A 192.0.2.1","xfr-b 300 IN AAAA 2001:db8::1","xfr-c 60 IN TXT \"hello\""]}`,
				`{"add":["*.xfr-wild 300 IN A 192.0.2.2"],"delete":[{"name":"xfr-b"}]}`,
				`{"add":["xfr-d 300 IN CNAME xfr-a","xfr-e 300 IN MX 10 xfr-a"]}`,
			}
			for _, c := range changes {
				if code, err := r.client().Do("POST", "/v1/zones/"+origin+"/records", c, nil); err != nil || code != http.StatusOK {
					t.Fatalf("POST %s: %d %v", c, code, err)
				}
			}
			now := soaSerial(r.addr(), origin)
			if now == first {
				t.Fatalf("the serial did not move from %d", first)
			}
			for _, x := range []struct {
				name string
				sec  *dnsdiff.Secondary
			}{{"NSD", sec}, {"Knot", knot}} {
				for deadline := time.Now().Add(30 * time.Second); soaSerial(x.sec.Addr, origin) != now; time.Sleep(50 * time.Millisecond) {
					if time.Now().After(deadline) {
						out, _ := exec.Command(harness.RequireTool(t, "kdig"), "@127.0.0.1", "-p", strconv.Itoa(r.dns), "+tcp", "+time=5", fmt.Sprintf("IXFR=%d", first), origin).CombinedOutput()
						t.Logf("kdig IXFR=%d: %s", first, out)
						t.Fatalf("%s did not reach serial %d (it has %d); its log:\n%s\nthe router's:\n%s", x.name, now, soaSerial(x.sec.Addr, origin), x.sec.Log(), tail(regexp.MustCompile(`(?m)^.*NOTIFY for .*\n`).ReplaceAllString(r.p.Logs(), ""), 8192))
					}
				}
			}
			changed := append([]dnsdiff.Query(nil), queries...)
			for _, n := range []string{"xfr-a", "xfr-b", "xfr-c", "xfr-d", "xfr-e", "xfr-wild", "x.xfr-wild"} {
				for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeCNAME, dns.TypeMX} {
					changed = append(changed, dnsdiff.Query{Name: n + "." + origin, Type: qt})
				}
			}
			dnsdiff.Compare(t, sec.Addr, r.addr(), changed)
			if log := sec.Log(); !strings.Contains(log, "notify for "+origin+" from 127.0.0.1") {
				t.Errorf("expected NSD to log the router's NOTIFYs, log:\n%s", log)
			}
			checkAXFR(t, r.addr(), r.client(), origin, now)

			harness.RequireTool(t, "dig")
			if ixfr := digXFR(t, r.dns, origin, fmt.Sprintf("IXFR=%d", now)); len(ixfr) != 1 || soaOf(ixfr[0]) != now {
				t.Errorf("IXFR from the current serial: expected the SOA alone, got %v", ixfr)
			}
			ixfr := digXFR(t, r.dns, origin, fmt.Sprintf("IXFR=%d", first))
			if len(ixfr) < 3 || soaOf(ixfr[0]) != now || soaOf(ixfr[len(ixfr)-1]) != now {
				t.Fatalf("IXFR from %d: expected it framed by SOA %d, got %v", first, now, ixfr)
			}
			if soaOf(ixfr[1]) != first || len(ixfr) > 40 {
				t.Errorf("IXFR from %d: expected the changes since, got %v", first, ixfr)
			}
			// NSD and Knot took the changes incrementally, cleanly.
			if log := sec.Log(); strings.Contains(log, "Failed to apply IXFR cleanly") || strings.Contains(log, "bad transfer") {
				t.Errorf("expected clean increments, NSD log:\n%s", log)
			}
			klog := knot.Log()
			if !strings.Contains(klog, "IXFR, incoming") || strings.Contains(klog, "fallback to AXFR") || strings.Contains(klog, "failed") {
				t.Errorf("expected Knot to take clean increments, log:\n%s", klog)
			}
			// Knot answers minimally (no NS in the authority section of
			// positive answers): its copy of the zone is compared instead.
			sameZone(t, knot.Addr, r.addr(), origin)
			// From a serial no transfer presented: the whole zone.
			if full := digXFR(t, r.dns, origin, fmt.Sprintf("IXFR=%d", first-1)); len(full) < 300 || soaOf(full[1]) != 0 {
				t.Errorf("IXFR from %d, a serial the router never presented: expected the whole zone, got %d records", first-1, len(full))
			}
			var sizes []int
			for _, m := range regexp.MustCompile(`Outgoing transfer of (\d+) records of zone "`+regexp.QuoteMeta(origin)+`"`).FindAllStringSubmatch(r.p.Logs(), -1) {
				n, _ := strconv.Atoi(m[1])
				sizes = append(sizes, n)
			}
			t.Logf("%s: the router sent transfers of %v records", origin, sizes)
			incremental := 0
			for _, n := range sizes {
				if n < 100 {
					incremental++
				}
			}
			if incremental < 2 {
				t.Errorf("expected NSD's and dig's IXFRs to be incremental, got transfers of %v records", sizes)
			}
		})
	}

	// Concurrent transfers through the router each take their fences, one
	// after the other: none waits for a fence to run out (5s), which two
	// transfers holding a shard each would make it do.
	t.Run("concurrent", func(t *testing.T) {
		r := s.routers[0]
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 3 {
			wg.Go(func() {
				for range 10 {
					tr := &dns.Transfer{DialTimeout: 2 * time.Second, ReadTimeout: 4 * time.Second}
					m := new(dns.Msg)
					m.SetAxfr(byName)
					ch, err := tr.In(m, r.addr())
					for env := range ch {
						if env.Error != nil {
							err = env.Error
						}
					}
					if err != nil {
						failed.Add(1)
						t.Errorf("concurrent AXFR: %v", err)
					}
				}
			})
		}
		wg.Wait()
	})

	// AXFRs while transactions change two names on different shards
	// together: every transfer has both at the same version.
	t.Run("consistent", func(t *testing.T) {
		r := s.routers[0]
		owner := func(name string) string {
			var out struct{ Owner string }
			if code, err := r.client().Do("GET", "/v1/shards?name="+name, nil, &out); err != nil || code != http.StatusOK || out.Owner == "" {
				t.Fatalf("GET /v1/shards?name=%s: %d %v %q", name, code, err, out.Owner)
			}
			return out.Owner
		}
		p1 := "pair-0." + byName
		var p2 string
		for i := 1; p2 == ""; i++ {
			if n := fmt.Sprintf("pair-%d.%s", i, byName); owner(n) != owner(p1) {
				p2 = n
			}
		}
		const writes = 40
		var wg sync.WaitGroup
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			for i := 1; i <= writes; i++ {
				body := map[string]any{
					"delete": []any{map[string]string{"name": p1, "type": "TXT"}, map[string]string{"name": p2, "type": "TXT"}},
					"add":    []string{fmt.Sprintf(`%s 60 IN TXT "v%d"`, p1, i), fmt.Sprintf(`%s 60 IN TXT "v%d"`, p2, i)},
				}
				if code, err := r.client().Do("POST", "/v1/zones/"+byName+"/records", body, nil); err != nil || code != http.StatusOK {
					t.Errorf("cross-shard change %d: %d %v", i, code, err)
					return
				}
			}
		})
		transfers, versions := 0, map[string]bool{}
		for stop := false; !stop && transfers < 200; {
			select {
			case <-done:
				stop = true
			default:
			}
			rrs, err := axfrIn(r.addr(), byName)
			if err != nil {
				t.Fatalf("AXFR during the changes: %v", err)
			}
			transfers++
			v := map[string]string{}
			for _, rr := range rrs {
				if txt, ok := rr.(*dns.TXT); ok {
					if name := strings.ToLower(txt.Hdr.Name); name == p1 || name == p2 {
						v[name] = strings.Join(txt.Txt, "")
					}
				}
			}
			if v[p1] != v[p2] {
				t.Errorf("AXFR %d is torn: %s %q, %s %q", transfers, p1, v[p1], p2, v[p2])
			}
			versions[v[p1]] = true
		}
		wg.Wait()
		t.Logf("%d AXFRs during %d cross-shard changes saw %d versions of the pair", transfers, writes, len(versions))
		if len(versions) < 3 {
			t.Errorf("expected the transfers to see several versions of the pair, got %d", len(versions))
		}
	})
}
