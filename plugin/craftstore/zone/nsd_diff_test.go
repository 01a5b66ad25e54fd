package zone

import (
	"net"
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// serve answers from z on 127.0.0.1 (UDP and TCP, one port) until the test
// ends, and returns the address.
func serve(t *testing.T, z *Zone) string {
	t.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionDesired = r.RecursionDesired
		q := r.Question[0]
		if q.Qclass == dns.ClassINET && dns.IsSubDomain(z.Origin(), dns.CanonicalName(q.Name)) {
			z.Lookup(m, q.Name, q.Qtype)
		} else {
			m.Rcode = dns.RcodeRefused
		}
		size := dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
			m.SetEdns0(opt.UDPSize(), false)
		}
		if _, ok := w.RemoteAddr().(*net.UDPAddr); ok {
			m.Truncate(size)
		}
		w.WriteMsg(m)
	})

	pc, l := dnsdiff.ListenUDPTCP(t)
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: l, Handler: handler}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return pc.LocalAddr().String()
}

// diff loads zoneText into a Zone, serves it, starts NSD on the same text and
// compares their answers to queries.
func diff(t *testing.T, origin, zoneText string, queries []dnsdiff.Query) {
	z := New(origin)
	z.Load(dnsdiff.ParseZone(t, origin, zoneText))
	ours := serve(t, z)
	nsd := dnsdiff.StartNSD(t, origin, zoneText)
	dnsdiff.Compare(t, nsd, ours, queries)
}

func TestNSDDiffGenerated(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		zone, queries := dnsdiff.GenerateZone("example.com.", seed, dnsdiff.DefaultNames)
		diff(t, "example.com.", zone, queries)
	}
}

// TestNSDDiffTables asks NSD the questions of this package's test tables,
// and a few more types for each, to check that their expectations are
// NSD's.
func TestNSDDiffTables(t *testing.T) {
	for _, tc := range []struct {
		origin, zone string
		queries      []dnsdiff.Query
	}{
		{"example.", rfc4592Zone, casesQueries(rfc4592Cases)},
		{"example.org.", exampleOrg, casesQueries(lookupCases)},
		{"example.org.", dnameOrg, casesQueries(dnameCases)},
		{"net.", dnameApex, casesQueries(dnameApexCases)},
		{"uni.com.", dnameUp, casesQueries(dnameUpCases)},
		{"bar.", dnameUpBar, casesQueries(dnameUpBarCases)},
	} {
		diff(t, tc.origin, tc.zone, tc.queries)
	}
}

// TestNSDDiffDNAMEChains asks NSD about DNAME chains: a DNAME applying
// again to what it synthesized, two DNAMEs to each other, one into its own
// subtree, and a CNAME into such a chain.
func TestNSDDiffDNAMEChains(t *testing.T) {
	const origin = "loop.example."
	text := `$ORIGIN loop.example.
@    300 IN SOA ns1.loop.example. hostmaster.loop.example. 1 7200 3600 1209600 300
@    300 IN NS  ns1.loop.example.
ns1  300 IN A   192.0.2.53
www  300 IN A   192.0.2.1
a    300 IN DNAME b.loop.example.
b    300 IN DNAME a.loop.example.
self 300 IN DNAME x.self.loop.example.
up   300 IN DNAME loop.example.
c    300 IN CNAME www.up.up.loop.example.
`
	var queries []dnsdiff.Query
	for _, n := range []string{"x.a", "x.b", "q.self", "www.up", "www.up.up", "nx.up.up", "ns1.up.up.up", "a.up", "x.a.up", "c", "q.self.up"} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeNS, dns.TypeCNAME, dns.TypeANY} {
			queries = append(queries, dnsdiff.Query{Name: n + "." + origin, Type: qt})
		}
	}
	diff(t, origin, text, queries)
}

func casesQueries(cases []test.Case) []dnsdiff.Query {
	var qs []dnsdiff.Query
	for _, tc := range cases {
		for _, t := range []uint16{tc.Qtype, dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeNS, dns.TypeSOA, dns.TypeCNAME, dns.TypeDS, dns.TypeSRV} {
			qs = append(qs, dnsdiff.Query{Name: tc.Qname, Type: t})
		}
	}
	return qs
}
