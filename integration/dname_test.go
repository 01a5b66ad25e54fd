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
