package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// dnameZone is a zone with DNAMEs (RFC 6672) at the apex of subtrees and
// pointing inside and outside the zone, with enough other names that both
// shards of a zone split by name hold some.
func dnameZone(origin string) (string, []dnsdiff.Query) {
	var b strings.Builder
	fmt.Fprintf(&b, "$ORIGIN %s\n@ 3600 IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ 3600 IN NS ns1\nns1 3600 IN A 192.0.2.53\n", origin)
	b.WriteString("old 1800 IN DNAME new\nold 3600 IN TXT \"beside\"\nnew 3600 IN A 192.0.2.1\nhost.new 3600 IN A 192.0.2.2\n")
	b.WriteString("ext 3600 IN DNAME example.net.\nloopa 3600 IN DNAME loopb\nloopb 3600 IN DNAME loopa\ncn 3600 IN CNAME a.old\n")
	var qs []dnsdiff.Query
	for i := range 40 {
		fmt.Fprintf(&b, "h%d 3600 IN A 192.0.2.%d\nh%d.new 3600 IN A 198.51.100.%d\n", i, i+10, i, i+10)
		qs = append(qs, dnsdiff.Query{Name: fmt.Sprintf("h%d.old.%s", i, origin), Type: dns.TypeA},
			dnsdiff.Query{Name: fmt.Sprintf("x%d.old.%s", i, origin), Type: dns.TypeA},
			dnsdiff.Query{Name: fmt.Sprintf("h%d.%s", i, origin), Type: dns.TypeA})
	}
	for _, n := range []string{"host.old", "a.b.old", "old", "new", "a.ext", "a.loopa", "cn", "nothere"} {
		for _, t := range []uint16{dns.TypeA, dns.TypeTXT, dns.TypeDNAME, dns.TypeCNAME, dns.TypeANY} {
			qs = append(qs, dnsdiff.Query{Name: n + "." + origin, Type: t})
		}
	}
	return b.String(), qs
}

// TestShardedDNAME: a zone with DNAMEs split over two shards by name is
// answered through the router as one member answers it, for names below a
// DNAME owner on either shard, each by the shard the ring gives it (every
// shard holds every DNAME: no broadcast); what one server refuses is
// refused over shards too (data below a DNAME held by another shard, a
// DNAME above names on another shard), writing nothing; DNAME changes
// through the router reach every shard and an NSD secondary of the router
// by IXFR (issue 33).
func TestShardedDNAME(t *testing.T) {
	const origin = "dname.example."
	wd := harness.Workdir(t)
	nsdPort := harness.ListenPort(t)
	s := startSharded(t, wd, 2, 1, []string{origin}, routerSpec{zones: []string{origin}, key: "name", notify: []int{nsdPort}})
	singleAddr, single := startSingle(t, wd, []string{origin})
	text, queries := dnameZone(origin)
	putZone(t, single, origin, text)
	rt := s.routers[0]
	putZone(t, rt.client(), origin, text)
	r := rt.addr()
	harness.Eventually(t, "the zone through the router", 20*time.Second, func() bool {
		m, err := harness.Query(r, origin, dns.TypeSOA)
		return err == nil && m.Rcode == dns.RcodeSuccess
	})
	res := compareWithRef(singleAddr, []string{r}, queries, true)[r]
	t.Logf("%d queries compared, %d differ", len(queries), res.differ)
	if res.differ > 0 {
		t.Errorf("%d of %d answers through the router differ from one member's: %s", res.differ, len(queries), res)
	}

	// Names below a DNAME whose targets exist: no shard is asked in vain.
	before := metricSum(t, routerMetrics(t, rt), "coredns_craftroute_broadcasts_total")
	for i := range 40 {
		m, err := harness.Query(r, fmt.Sprintf("h%d.old.%s", i, origin), dns.TypeA)
		if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 3 {
			t.Fatalf("h%d.old: expected the DNAME, its CNAME and the A, got %v %v", i, m, err)
		}
	}
	if after := metricSum(t, routerMetrics(t, rt), "coredns_craftroute_broadcasts_total"); after != before {
		t.Errorf("40 names below a DNAME made %v broadcasts, expected none", after-before)
	}

	first := soaSerial(r, origin)
	sec := dnsdiff.StartNSDSecondary(t, origin, r, nsdPort)
	if got := soaSerial(sec.Addr, origin); got != first {
		t.Fatalf("expected NSD at serial %d, got %d", first, got)
	}

	// Refused over shards as by one server, nothing written.
	post := func(c harness.API, body string) (int, string) {
		var out string
		code, err := c.Do("POST", "/v1/zones/"+origin+"/records", json.RawMessage(body), &out)
		if err != nil {
			t.Fatal(err)
		}
		return code, out
	}
	update := func(add, del []dns.RR) *dns.Msg {
		m := new(dns.Msg)
		m.SetUpdate(origin)
		m.Insert(add)
		m.RemoveRRset(del)
		m.SetEdns0(1232, false)
		resp, err := exchangeUpdate(m, "tcp", r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range 8 {
		name := fmt.Sprintf("y%d.old", i)
		if code, out := post(rt.client(), `{"add":["`+name+` 300 IN A 192.0.2.9"]}`); code != 409 || !strings.Contains(out, "below the DNAME") {
			t.Errorf("%s A through the router's API: expected 409 saying why, got %d %s", name, code, out)
		}
		resp := update([]dns.RR{mustRR(t, name+"."+origin+" 300 IN A 192.0.2.9")}, nil)
		if resp.Rcode != dns.RcodeRefused || !strings.Contains(extendedError(resp), "below the DNAME") {
			t.Errorf("%s A by UPDATE through the router: expected REFUSED with an Extended DNS Error saying why, got %v", name, resp)
		}
	}
	// new has names below it on both shards.
	if code, out := post(rt.client(), `{"add":["new 300 IN DNAME elsewhere.example."]}`); code != 409 || !strings.Contains(out, "DNAME") {
		t.Errorf("a DNAME above names through the router's API: expected 409 saying why, got %d %s", code, out)
	}
	if resp := update([]dns.RR{mustRR(t, "new."+origin+" 300 IN DNAME elsewhere.example.")}, nil); resp.Rcode != dns.RcodeRefused || !strings.Contains(extendedError(resp), "DNAME") {
		t.Errorf("a DNAME above names by UPDATE through the router: expected REFUSED with an Extended DNS Error saying why, got %v", resp)
	}
	if got := soaSerial(r, origin); got != first {
		t.Errorf("refused writes moved the serial from %d to %d", first, got)
	}

	// DNAME changes through the router, the same through the one member's
	// API: a new DNAME, one moved, every RRset of a DNAME owner removed.
	changes := []string{
		`{"add":["fresh 300 IN DNAME new"]}`,
		`{"delete":[{"name":"old"}]}`,
	}
	for _, c := range changes {
		if code, out := post(rt.client(), c); code != 200 {
			t.Fatalf("%s through the router: %d %s", c, code, out)
		}
		if code, out := post(single, c); code != 200 {
			t.Fatalf("%s through the member: %d %s", c, code, out)
		}
	}
	if resp := update([]dns.RR{mustRR(t, "ups."+origin+" 300 IN DNAME new."+origin)}, []dns.RR{mustRR(t, "ext."+origin+" 0 IN DNAME example.net.")}); resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("UPDATE adding and removing DNAMEs through the router: %v", resp)
	}
	if code, out := post(single, `{"add":["ups 300 IN DNAME new"],"delete":[{"name":"ext","type":"DNAME"}]}`); code != 200 {
		t.Fatalf("the same change through the member: %d %s", code, out)
	}
	now := soaSerial(r, origin)
	for deadline := time.Now().Add(30 * time.Second); soaSerial(sec.Addr, origin) != now; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("NSD did not reach serial %d (it has %d); its log:\n%s", now, soaSerial(sec.Addr, origin), sec.Log())
		}
	}
	var changed []dnsdiff.Query
	for _, n := range []string{"fresh", "h1.fresh", "x.fresh", "old", "h1.old", "host.old", "ups", "h2.ups", "ext", "a.ext", "cn", "new", "h3.new"} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeTXT, dns.TypeDNAME, dns.TypeCNAME, dns.TypeANY} {
			changed = append(changed, dnsdiff.Query{Name: n + "." + origin, Type: qt})
		}
	}
	res = compareWithRef(singleAddr, []string{r, sec.Addr}, changed, true)[r]
	if res.differ > 0 {
		t.Errorf("after DNAME changes, %d of %d answers through the router differ from one member's: %s", res.differ, len(changed), res)
	}
	dnsdiff.Compare(t, sec.Addr, r, changed)
	if log := sec.Log(); !strings.Contains(log, "notify for "+origin) || strings.Contains(log, "Failed to apply IXFR cleanly") || strings.Contains(log, "bad transfer") {
		t.Errorf("expected NSD to follow the router by NOTIFY and clean IXFR, log:\n%s", log)
	}
	// The router's IXFR from the first serial: the DNAMEs removed and
	// added, each once though every shard holds it.
	ixfr := digXFR(t, rt.dns, origin, fmt.Sprintf("IXFR=%d", first))
	var got []string
	for _, rr := range ixfr {
		if rr.Header().Rrtype == dns.TypeDNAME {
			got = append(got, strings.ToLower(rr.Header().Name)+" "+rr.(*dns.DNAME).Target)
		}
	}
	want := []string{"ext." + origin + " example.net.", "old." + origin + " new." + origin, "fresh." + origin + " new." + origin, "ups." + origin + " new." + origin}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || len(ixfr) > 30 || soaOf(ixfr[1]) != first {
		t.Errorf("IXFR from %d: expected the DNAMEs %v removed or added once, incrementally, got %v", first, want, ixfr)
	}
	// The router's AXFR: every record once, the DNAMEs every shard holds
	// included.
	axfr, err := axfrIn(r, origin)
	if err != nil {
		t.Fatal(err)
	}
	seen, dnames := map[string]bool{}, 0
	for _, rr := range axfr[1 : len(axfr)-1] {
		k := strings.ToLower(rr.String())
		if seen[k] {
			t.Errorf("AXFR through the router holds %s twice", rr)
		}
		seen[k] = true
		if rr.Header().Rrtype == dns.TypeDNAME {
			dnames++
		}
	}
	if dnames != 4 { // fresh, ups, loopa, loopb
		t.Errorf("AXFR through the router: expected 4 DNAMEs, got %d", dnames)
	}
}

// TestDNAMERefusalsSingle: through the single example's API and UPDATE, a
// DNAME is written and answered, and what RFC 6672 forbids is refused with
// the right status or rcode and Extended DNS Error, writing nothing: data
// below the DNAME (API 409, UPDATE REFUSED), a zone file with a name below
// one (PUT 400, no zone made).
func TestDNAMERefusalsSingle(t *testing.T) {
	wd := harness.Workdir(t)
	p := harness.Start(t, "single", wd, "Corefile.examples/single.Corefile")
	harness.WaitReady(t, "http://127.0.0.1:8181/ready", p)
	const addr = "127.0.0.1:1053"
	harness.Eventually(t, "the seeded zone", 20*time.Second, func() bool { return harness.HasA(addr, "www.example.org", "192.0.2.10") })
	a := harness.API{Base: "http://127.0.0.1:8053"}
	post := func(rr string) (int, string) {
		var out string
		code, err := a.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{rr}}, &out)
		if err != nil {
			t.Fatal(err)
		}
		return code, out
	}
	if code, out := post("old.example.org. 300 IN DNAME www.example.org."); code != 200 {
		t.Fatalf("adding a DNAME: %d %s", code, out)
	}
	serial := harness.Rdata(t, addr, "example.org", dns.TypeSOA)

	// The DNAME answers: x.old is x.www, which does not exist.
	r, err := harness.Query(addr, "x.old.example.org", dns.TypeA)
	if err != nil || r.Rcode != dns.RcodeNameError || len(r.Answer) != 2 || r.Answer[0].Header().Rrtype != dns.TypeDNAME {
		t.Errorf("x.old.example.org A: expected NXDOMAIN with the DNAME and its CNAME, got %v %v", r, err)
	}

	if code, out := post("host.old.example.org. 300 IN A 192.0.2.5"); code != 409 || !strings.Contains(out, "below the DNAME") {
		t.Errorf("data below the DNAME through the API: expected 409 saying why, got %d %s", code, out)
	}
	m := newUpdate()
	m.Insert([]dns.RR{mustRR(t, "host.old.example.org. 300 IN A 192.0.2.5")})
	m.SetEdns0(1232, false)
	resp, err := exchangeUpdate(m, "tcp", addr)
	if err != nil || resp.Rcode != dns.RcodeRefused || !strings.Contains(extendedError(resp), "below the DNAME") {
		t.Errorf("data below the DNAME by UPDATE: expected REFUSED with an Extended DNS Error saying why, got %v %v", resp, err)
	}
	if got := harness.Rdata(t, addr, "example.org", dns.TypeSOA); got != serial {
		t.Errorf("a refused write changed the zone: SOA %s, was %s", got, serial)
	}

	// A zone of the member's server block (example.org): one outside it is
	// refused before it is read (403).
	zone := "$ORIGIN bad.example.org.\n@ 300 IN SOA ns1 host 1 2 3 4 5\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.1\nd 300 IN DNAME x.test.\na.d 300 IN A 192.0.2.2\n"
	var out string
	if code, err := a.Do("PUT", "/v1/zones/bad.example.org", zone, &out); err != nil || code != 400 || !strings.Contains(out, "below the DNAME") {
		t.Errorf("PUT of a zone with a name below a DNAME: expected 400 saying why, got %d %v %s", code, err, out)
	}
	if code, _ := a.Do("GET", "/v1/zones/bad.example.org", nil, nil); code != 404 {
		t.Errorf("the refused zone exists: GET answered %d", code)
	}
}
