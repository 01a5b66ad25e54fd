package integration

import (
	"fmt"
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
// DNAME owner on either shard (issue 33).
func TestShardedDNAME(t *testing.T) {
	const origin = "dname.example."
	wd := harness.Workdir(t)
	s := startSharded(t, wd, 2, 1, []string{origin}, routerSpec{zones: []string{origin}, key: "name"})
	singleAddr, single := startSingle(t, wd, []string{origin})
	text, queries := dnameZone(origin)
	putZone(t, single, origin, text)
	putZone(t, s.routers[0].client(), origin, text)
	r := s.routers[0].addr()
	harness.Eventually(t, "the zone through the router", 20*time.Second, func() bool {
		m, err := harness.Query(r, origin, dns.TypeSOA)
		return err == nil && m.Rcode == dns.RcodeSuccess
	})
	res := compareWithRef(singleAddr, []string{r}, queries, true)[r]
	t.Logf("%d queries compared, %d differ", len(queries), res.differ)
	if res.differ > 0 {
		t.Errorf("%d of %d answers through the router differ from one member's: %s", res.differ, len(queries), res)
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

	zone := "$ORIGIN bad.test.\n@ 300 IN SOA ns1 host 1 2 3 4 5\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.1\nd 300 IN DNAME x.test.\na.d 300 IN A 192.0.2.2\n"
	var out string
	if code, err := a.Do("PUT", "/v1/zones/bad.test", zone, &out); err != nil || code != 400 || !strings.Contains(out, "below the DNAME") {
		t.Errorf("PUT of a zone with a name below a DNAME: expected 400 saying why, got %d %v %s", code, err, out)
	}
	if code, _ := a.Do("GET", "/v1/zones/bad.test", nil, nil); code != 404 {
		t.Errorf("the refused zone exists: GET answered %d", code)
	}
}
