package zone

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

func rrs(t testing.TB, text ...string) []dns.RR {
	t.Helper()
	out := make([]dns.RR, len(text))
	for i, s := range text {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("parsing %q: %v", s, err)
		}
		out[i] = rr
	}
	return out
}

func nodata(name string) test.Case {
	return test.Case{Qname: name, Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA}
}

func nxdomain(name string) test.Case {
	return test.Case{Qname: name, Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA}
}

func TestSetENT(t *testing.T) {
	z := load(t, "example.org.", exampleOrg)
	names, records, mapSize := z.Names(), z.Records(), z.load().names.n

	// Adding a deep name creates its empty non-terminals.
	z.Set([]NameRecords{{Name: "A.B.C.New.example.org.", RRs: rrs(t, "a.b.c.new.example.org. 3600 IN A 192.0.2.1")}})
	check(t, z, []test.Case{
		{Qname: "a.b.c.new.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("a.b.c.new.example.org. 3600 IN A 192.0.2.1")}, Ns: orgNS},
		nodata("b.c.new.example.org."), nodata("c.new.example.org."), nodata("new.example.org."),
		nxdomain("x.c.new.example.org."),
	})
	if z.Names() != names+1 || z.Records() != records+1 {
		t.Errorf("expected %d names and %d records, got %d and %d", names+1, records+1, z.Names(), z.Records())
	}

	// A sibling keeps the shared ENTs alive when the first name goes.
	z.Set([]NameRecords{{Name: "d.c.new.example.org.", RRs: rrs(t, "d.c.new.example.org. 3600 IN A 192.0.2.2")}})
	z.Set([]NameRecords{{Name: "a.b.c.new.example.org."}})
	check(t, z, []test.Case{
		nxdomain("a.b.c.new.example.org."), nxdomain("b.c.new.example.org."),
		nodata("c.new.example.org."), nodata("new.example.org."),
	})

	// Deleting the last descendant removes every ENT above it.
	z.Set([]NameRecords{{Name: "D.C.NEW.EXAMPLE.ORG."}})
	check(t, z, []test.Case{nxdomain("d.c.new.example.org."), nxdomain("c.new.example.org."), nxdomain("new.example.org.")})
	if z.Names() != names || z.Records() != records || z.load().names.n != mapSize {
		t.Errorf("expected %d names, %d records, %d nodes, got %d, %d, %d", names, records, mapSize, z.Names(), z.Records(), z.load().names.n)
	}

	// A name with data below it becomes an ENT when its data goes, and
	// disappears with its last child.
	z.Set([]NameRecords{
		{Name: "p.example.org.", RRs: rrs(t, "p.example.org. 3600 IN A 192.0.2.3")},
		{Name: "q.p.example.org.", RRs: rrs(t, "q.p.example.org. 3600 IN A 192.0.2.4")},
	})
	z.Set([]NameRecords{{Name: "p.example.org."}})
	check(t, z, []test.Case{nodata("p.example.org.")})
	z.Set([]NameRecords{{Name: "q.p.example.org."}})
	check(t, z, []test.Case{nxdomain("p.example.org.")})

	// The ENTs of the loaded zone are untouched.
	check(t, z, []test.Case{nodata("ent.example.org."), nodata("c.ent.example.org.")})

	// Deleting a name that does not exist changes nothing.
	z.Set([]NameRecords{{Name: "never.example.org."}, {Name: "outside.example.net."}})
	if z.Names() != names || z.Records() != records || z.load().names.n != mapSize {
		t.Errorf("expected %d names, %d records, %d nodes, got %d, %d, %d", names, records, mapSize, z.Names(), z.Records(), z.load().names.n)
	}
}

func TestSetWildcard(t *testing.T) {
	z := load(t, "example.org.", exampleOrg)
	wilds := wildFlags(z)
	check(t, z, []test.Case{nxdomain("host.dyn.example.org.")})

	z.Set([]NameRecords{{Name: "*.dyn.example.org.", RRs: rrs(t, "*.dyn.example.org. 60 IN A 192.0.2.7")}})
	check(t, z, []test.Case{
		{Qname: "host.dyn.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("host.dyn.example.org. 60 IN A 192.0.2.7")}, Ns: orgNS},
		nodata("dyn.example.org."),
	})

	// A name below the wildcard makes it an ENT: it still synthesizes, NODATA.
	z.Set([]NameRecords{
		{Name: "*.dyn.example.org."},
		{Name: "x.*.dyn.example.org.", RRs: rrs(t, "x.*.dyn.example.org. 60 IN A 192.0.2.8")},
	})
	check(t, z, []test.Case{nodata("host.dyn.example.org."), nodata("*.dyn.example.org.")})

	z.Set([]NameRecords{{Name: "x.*.dyn.example.org."}})
	check(t, z, []test.Case{nxdomain("host.dyn.example.org."), nxdomain("dyn.example.org.")})
	if n := z.load().names.get("example.org."); n.flags&fWild != 0 {
		t.Errorf("expected no wildcard flag at the apex")
	}
	if got := wildFlags(z); got != wilds {
		t.Errorf("expected %d names with a wildcard child, got %d", wilds, got)
	}
}

func TestSetDelegationAndApex(t *testing.T) {
	z := load(t, "example.org.", exampleOrg)
	cuts := z.load().cuts

	z.Set([]NameRecords{{Name: "www.example.org.", RRs: rrs(t, "www.example.org. 3600 IN NS ns.other.net.")}})
	check(t, z, []test.Case{{Qname: "a.www.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{test.NS("www.example.org. 3600 IN NS ns.other.net.")}}})
	z.Set([]NameRecords{{Name: "www.example.org.", RRs: rrs(t, "www.example.org. 3600 IN A 192.0.2.80")}})
	check(t, z, []test.Case{{Qname: "www.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("www.example.org. 3600 IN A 192.0.2.80")}, Ns: orgNS}})
	if z.load().cuts != cuts {
		t.Errorf("expected %d cuts, got %d", cuts, z.load().cuts)
	}

	// A new SOA changes the negative answers (RFC 2308 §3: min(TTL, MINIMUM)).
	z.Set([]NameRecords{{Name: "EXAMPLE.ORG.", RRs: rrs(t,
		"example.org. 60 IN SOA ns1.example.org. hostmaster.example.org. 2024010102 7200 3600 1209600 300",
		"example.org. 3600 IN NS ns1.example.org.",
	)}})
	if soa := z.SOA(); soa == nil || soa.Serial != 2024010102 {
		t.Fatalf("expected serial 2024010102, got %v", soa)
	}
	check(t, z, []test.Case{{
		Qname: "nope.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError,
		Ns: []dns.RR{test.SOA("example.org. 60 IN SOA ns1.example.org. hostmaster.example.org. 2024010102 7200 3600 1209600 300")},
	}})
	if got := z.RRs("Example.Org.", dns.TypeNS); len(got) != 1 {
		t.Errorf("expected 1 apex NS, got %v", got)
	}
	if got := z.RRs("www.example.org.", 0); len(got) != 1 || got[0].Header().Rrtype != dns.TypeA {
		t.Errorf("expected the A at www, got %v", got)
	}
	if got := z.RRs("ent.example.org.", 0); got != nil {
		t.Errorf("expected nothing at an ENT, got %v", got)
	}
}

// TestConcurrentSetLookup is for the race detector: readers and a writer.
func TestConcurrentSetLookup(t *testing.T) {
	z := load(t, "example.org.", exampleOrg)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := new(dns.Msg)
				z.Lookup(m, fmt.Sprintf("h%d.x.dyn.example.org.", i%50), dns.TypeA)
				z.Lookup(m, "c1.example.org.", dns.TypeA)
				_ = z.Records()
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		name := fmt.Sprintf("h%d.x.dyn.example.org.", i%50)
		if i%3 == 0 {
			z.Set([]NameRecords{{Name: name}})
			continue
		}
		z.Set([]NameRecords{
			{Name: name, RRs: rrs(t, name+" 60 IN A 192.0.2.1")},
			{Name: "*.x.dyn.example.org.", RRs: rrs(t, "*.x.dyn.example.org. 60 IN TXT \"w\"")},
		})
	}
	close(stop)
	wg.Wait()
}

// Repeated RRs are dropped as NSD drops them; TTLs within an RRset are kept.
func TestLoadDedup(t *testing.T) {
	z := load(t, "example.org.", exampleOrg+`
dup 600 IN A 192.0.2.70
dup 600 IN A 192.0.2.70
DUP 60 IN A 192.0.2.70
ttl 600 IN A 192.0.2.72
ttl 60 IN A 192.0.2.73
cdup 600 IN CNAME www
cdup 600 IN CNAME WWW
`)
	check(t, z, []test.Case{
		{Qname: "dup.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("dup.example.org. 600 IN A 192.0.2.70")}, Ns: orgNS},
		{Qname: "ttl.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("ttl.example.org. 60 IN A 192.0.2.73"), test.A("ttl.example.org. 600 IN A 192.0.2.72")}, Ns: orgNS},
		{Qname: "cdup.example.org.", Qtype: dns.TypeCNAME, Authoritative: true, Answer: []dns.RR{test.CNAME("cdup.example.org. 600 IN CNAME www.example.org.")}, Ns: orgNS},
	})

	// Large RRsets take another path.
	var big []dns.RR
	for i := 0; i < 200; i++ {
		big = append(big, rrs(t, fmt.Sprintf("big.example.org. 60 IN A 10.0.0.%d", i%100))...)
	}
	records := z.Records()
	z.Set([]NameRecords{{Name: "big.example.org.", RRs: big}})
	if got := z.Records() - records; got != 100 {
		t.Errorf("expected 100 distinct RRs, got %d", got)
	}
}

// A chain without a loop is cut after maxChain names (NSD follows it to the
// end).
func TestLongChain(t *testing.T) {
	text := exampleOrg
	for i := 0; i < maxChain+10; i++ {
		text += fmt.Sprintf("long%d 60 IN CNAME long%d\n", i, i+1)
	}
	z := load(t, "example.org.", text)
	m := new(dns.Msg)
	z.Lookup(m, "long0.example.org.", dns.TypeA)
	if len(m.Answer) != maxChain || m.Rcode != dns.RcodeSuccess || len(m.Ns) != 0 {
		t.Errorf("expected %d CNAMEs, NOERROR, no authority; got %d, %s, %d", maxChain, len(m.Answer), dns.RcodeToString[m.Rcode], len(m.Ns))
	}
}

// wildFlags counts the names of z's current version that have a wildcard
// child.
func wildFlags(z *Zone) int {
	n := 0
	eachNode(z, func(v *node) {
		if v.flags&fWild != 0 {
			n++
		}
	})
	return n
}

// TestWithOwner checks that the zone keeps each packed name's RRs as copies
// that share the node's name, the RRs they were given left alone, and that
// the copies are the same RRs.
func TestWithOwner(t *testing.T) {
	in := rrs(t,
		"a.example.org. 300 IN A 192.0.2.1",
		"a.example.org. 300 IN AAAA 2001:db8::1",
		"a.example.org. 300 IN MX 10 mail.example.org.",
		"a.example.org. 300 IN TXT \"hello\" \"world\"",
		"a.example.org. 300 IN SRV 0 5 5060 sip.example.org.",
		"a.example.org. 300 IN NS ns.elsewhere.",
		"a.example.org. 300 IN PTR p.example.org.",
		"a.example.org. 300 IN HINFO cpu os",
		"b.example.org. 300 IN CNAME a.example.org.",
		"c.example.org. 300 IN A 192.0.2.3",
	)
	want := make([]string, len(in))
	for i, rr := range in {
		want[i] = rr.String()
	}
	z := load(t, "example.org.", exampleOrg)
	z.Load(in)
	for i, rr := range in {
		if rr.String() != want[i] {
			t.Errorf("the zone changed an RR it was given: %s, was %s", rr, want[i])
		}
	}
	v := z.load()
	kept := 0
	for _, name := range []string{"a.example.org.", "b.example.org.", "c.example.org."} {
		n := v.names.get(name)
		if n == nil || n.wlen == 0 {
			t.Fatalf("%s: no packed node", name)
		}
		for _, rr := range n.records() {
			kept++
			if !slices.ContainsFunc(want, func(s string) bool { return s == rr.String() }) {
				t.Errorf("%s: the zone holds %s, not given", name, rr)
			}
			if slices.Contains(in, rr) {
				if _, ok := rr.(*dns.HINFO); !ok {
					t.Errorf("%s: %s is the RR given, not a copy", name, rr)
				}
				continue
			}
			if unsafe.StringData(rr.Header().Name) != unsafe.StringData(n.name) {
				t.Errorf("%s: the copy of %s does not share the node's name", name, rr)
			}
		}
	}
	if kept != len(in) {
		t.Errorf("the zone holds %d of the %d RRs", kept, len(in))
	}
}

// blockTypes are the types whose records a node's block holds (block.go).
var blockTypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeNS, dns.TypePTR, dns.TypeMX, dns.TypeSRV, dns.TypeTXT}

// TestBlockTypeList: the types a block holds are blockTypes, and each of them
// is copied by synthesize and withOwner as the same record under its new
// owner.
func TestBlockTypeList(t *testing.T) {
	samples := map[uint16]string{
		dns.TypeA: "192.0.2.1", dns.TypeAAAA: "2001:db8::1", dns.TypeCNAME: "c.example.org.",
		dns.TypeNS: "ns.example.org.", dns.TypePTR: "p.example.org.", dns.TypeMX: "10 mail.example.org.",
		dns.TypeSRV: "0 5 5060 sip.example.org.", dns.TypeTXT: `"a" "b"`,
	}
	var held []uint16
	for typ, newRR := range dns.TypeToRR {
		rr := newRR()
		rr.Header().Rrtype = typ
		if typ == dns.TypeA {
			rr.(*dns.A).A = net.IPv4(192, 0, 2, 1).To4()
		}
		if typ == dns.TypeAAAA {
			rr.(*dns.AAAA).AAAA = net.ParseIP("2001:db8::1")
		}
		if typ == dns.TypeTXT {
			rr.(*dns.TXT).Txt = []string{"a"}
		}
		if blockRR(rr) {
			held = append(held, typ)
		}
	}
	slices.Sort(held)
	want := slices.Sorted(slices.Values(blockTypes))
	if !slices.Equal(held, want) {
		t.Errorf("blockRR holds %v, blockTypes lists %v", held, want)
	}
	for _, typ := range blockTypes {
		rr, err := dns.NewRR("a.example.org. 300 IN " + dns.TypeToString[typ] + " " + samples[typ])
		if err != nil {
			t.Fatalf("%s: %v", dns.TypeToString[typ], err)
		}
		wantText := strings.Replace(rr.String(), "a.example.org.", "b.example.org.", 1)
		if got := synthesize(rr, "b.example.org."); got.String() != wantText || got == rr {
			t.Errorf("synthesize %s: got %s", rr, got)
		}
		if got := withOwner(rr, "a.example.org."); got.String() != rr.String() || got.Header().Rrtype != typ {
			t.Errorf("withOwner %s: got %s", rr, got)
		}
	}
}

// TestWith: a zone with changes answers as Set would make it, and the zone
// it came from stays as it was.
func TestWith(t *testing.T) {
	z := load(t, "example.org.", exampleOrg)
	names, records := z.Names(), z.Records()
	w := z.With([]NameRecords{{Name: "A.B.New.example.org.", RRs: rrs(t, "a.b.new.example.org. 3600 IN A 192.0.2.1")}})
	check(t, w, []test.Case{
		{Qname: "a.b.new.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("a.b.new.example.org. 3600 IN A 192.0.2.1")}, Ns: orgNS},
		nodata("b.new.example.org."),
	})
	check(t, z, []test.Case{nxdomain("a.b.new.example.org."), nxdomain("b.new.example.org.")})
	if z.Names() != names || z.Records() != records || w.Names() != names+1 || w.Records() != records+1 {
		t.Errorf("names and records: zone %d/%d (was %d/%d), with the change %d/%d", z.Names(), z.Records(), names, records, w.Names(), w.Records())
	}
	// The zone changes on: the preview made before is not touched.
	z.Set([]NameRecords{{Name: "c.example.org.", RRs: rrs(t, "c.example.org. 3600 IN A 192.0.2.3")}})
	check(t, w, []test.Case{nxdomain("c.example.org.")})
}

// TestMinedBlock: a name kept in a block whose node a write copies (a name
// added below it changes its child count) keeps its RRs, decoded from the
// block, and a Load that adds to that name keeps both the old and the new.
func TestMinedBlock(t *testing.T) {
	z := load(t, "example.org.", exampleOrg)
	z.Load(rrs(t, "h.example.org. 300 IN A 192.0.2.1", "h.example.org. 300 IN AAAA 2001:db8::1"))
	if n := z.load().names.get("h.example.org."); n == nil || n.flags&fBlock == 0 {
		t.Fatal("h.example.org. is not a block")
	}
	records := z.Records()
	z.Set([]NameRecords{{Name: "x.h.example.org.", RRs: rrs(t, "x.h.example.org. 300 IN A 192.0.2.2")}})
	n := z.load().names.get("h.example.org.")
	if n == nil || n.flags&fBlock != 0 || n.kids != 1 || n.rrs != nil {
		t.Fatalf("the copy of h.example.org.: %+v", n)
	}
	if got := len(z.RRs("h.example.org.", 0)); got != 2 || z.Records() != records+1 {
		t.Errorf("h.example.org. holds %d RRs, the zone %d records (want 2, %d)", got, z.Records(), records+1)
	}
	z.Load(rrs(t, "h.example.org. 300 IN TXT \"t\""))
	var got []string
	for _, rr := range z.RRs("h.example.org.", 0) {
		got = append(got, dns.TypeToString[rr.Header().Rrtype])
	}
	if strings.Join(got, " ") != "A TXT AAAA" || z.Records() != records+2 {
		t.Errorf("after the Load h.example.org. holds %v, the zone %d records (want A TXT AAAA, by type, %d)", got, z.Records(), records+2)
	}
}
