// Package dnsdiff is a differential tester for authoritative name servers:
// it generates zones full of the cases that are easy to get wrong, starts
// NSD on them as the reference, and compares the answers of two servers.
package dnsdiff

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Query is one question to ask both servers (class IN).
type Query struct {
	Name string
	Type uint16
}

func (q Query) String() string { return q.Name + " " + dns.TypeToString[q.Type] }

// qtypes are the types every interesting name is asked for. ANY is left out:
// RFC 8482 lets servers pick what to answer.
var qtypes = []uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeNS, dns.TypeSOA,
	dns.TypeCNAME, dns.TypeDS, dns.TypeSRV, dns.TypePTR, dns.TypeDNSKEY, dns.TypeDNAME,
}

// DefaultNames is a names argument for GenerateZone that yields a few
// thousand queries.
const DefaultNames = 300

// GenerateZone returns a deterministic zone for origin and the queries to ask
// about it. The zone holds a fixed set of hard cases (wildcards at several
// depths, a wildcard CNAME, a wildcard with only some types, a wildcard empty
// non-terminal, empty non-terminals, delegations with glue, occluded glue,
// names and a wildcard below cuts, a nested cut, DS at a cut, CNAME chains
// including loops and chains into wildcards, delegations, empty
// non-terminals and out of the zone, DNAMEs (inside and out of the zone,
// loops), apex SOA/NS/MX/TXT/DNSKEY, names that
// differ only in case, several types per name) and names random names
// chosen by seed. The queries cover existing, missing, wildcard-matched,
// empty non-terminal and delegated names for several types, with random
// 0x20 case.
func GenerateZone(origin string, seed int64, names int) (zoneText string, queries []Query) {
	o := dns.CanonicalName(origin)
	g := &generator{
		origin: o,
		rng:    rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
		rrsets: map[string]map[uint16]*rrset{},
	}
	g.fixture()
	g.random(names)
	return g.text(), g.queries()
}

type rrset struct {
	ttl   uint32
	rdata []string
	spell []string // the owner name of each RR as written in the zone file
}

type generator struct {
	origin string
	rng    *rand.Rand

	owners []string                     // canonical owner names in order of first use
	rrsets map[string]map[uint16]*rrset // canonical owner → type → RRset
	extra  []string                     // more names to ask about (canonical)
	raw    []string                     // zone file lines added as they are
}

// abs makes a name relative to the origin absolute ("@" is the origin).
func (g *generator) abs(rel string) string {
	switch {
	case rel == "@":
		return g.origin
	case strings.HasSuffix(rel, "."):
		return rel
	}
	return rel + "." + g.origin
}

// add adds an RR at rel (relative to the origin, any case). An RR that would
// put a CNAME beside other data, or repeat an RR, is dropped; the TTL of an
// RRset is the first one given.
func (g *generator) add(rel string, ttl uint32, t uint16, rdata string) {
	name := g.abs(rel)
	key := dns.CanonicalName(name)
	types := g.rrsets[key]
	if types == nil {
		types = map[uint16]*rrset{}
		g.rrsets[key] = types
		g.owners = append(g.owners, key)
	}
	if _, ok := types[dns.TypeCNAME]; ok {
		return // one CNAME, nothing beside it
	}
	if t == dns.TypeCNAME && len(types) > 0 {
		return
	}
	set := types[t]
	if set == nil {
		set = &rrset{ttl: ttl}
		types[t] = set
	}
	for _, r := range set.rdata {
		if strings.EqualFold(r, rdata) {
			return
		}
	}
	set.rdata = append(set.rdata, rdata)
	set.spell = append(set.spell, name)
}

// ask adds names to query beyond the owners and their ancestors.
func (g *generator) ask(rel ...string) {
	for _, r := range rel {
		g.extra = append(g.extra, dns.CanonicalName(g.abs(r)))
	}
}

func (g *generator) fixture() {
	const (
		A    = dns.TypeA
		AAAA = dns.TypeAAAA
		CN   = dns.TypeCNAME
		TXT  = dns.TypeTXT
		MX   = dns.TypeMX
		NS   = dns.TypeNS
		DS   = dns.TypeDS
		SRV  = dns.TypeSRV
	)
	o := g.origin
	// The SOA TTL is below MINIMUM for some seeds, above for others: the
	// negative answer TTL is the smaller of the two (RFC 2308 §3).
	soaTTL := []uint32{3600, 120}[g.rng.IntN(2)]
	g.add("@", soaTTL, dns.TypeSOA, fmt.Sprintf("ns1.%s hostmaster.%s %d 7200 3600 1209600 300", o, o, 2024000000+g.rng.IntN(1000)))
	g.add("@", 3600, NS, "ns1."+o)
	g.add("@", 3600, NS, "ns2.example-dns.net.")
	g.add("@", 3600, MX, "10 mail."+o)
	g.add("@", 3600, MX, "20 mx.example-mail.net.")
	g.add("@", 3600, TXT, `"v=spf1 mx -all"`)
	g.add("@", 3600, dns.TypeDNSKEY, "257 3 8 AwEAAagAIKlVZrpC6Ia7gEzahOR+9W29euxhJhVVLOyQbSEW0O8gcCjF")
	g.add("ns1", 3600, A, "192.0.2.53")
	g.add("ns1", 3600, AAAA, "2001:db8::53")
	g.add("mail", 3600, A, "192.0.2.25")
	g.add("www", 300, A, "192.0.2.80")
	g.add("www", 300, A, "192.0.2.81")
	g.add("www", 300, AAAA, "2001:db8::80")
	g.add("www", 300, TXT, `"web server"`)
	g.add("_sip._udp", 3600, SRV, "10 60 5060 www."+o)
	g.add("_sip._tcp", 3600, SRV, "10 60 5060 www."+o)
	g.add("ptr", 3600, dns.TypePTR, "www."+o)

	// Names that differ only in case are one name.
	g.add("Mixed", 3600, A, "192.0.2.30")
	g.add("mixed", 3600, TXT, `"mixed case"`)
	g.add("MIXED", 3600, AAAA, "2001:db8::30")

	// Empty non-terminals.
	g.add("a.b.c.ent", 3600, A, "192.0.2.40")
	g.add("x.y.ent2", 3600, A, "192.0.2.41")
	g.add("z.y.ent2", 3600, TXT, `"z"`)
	g.ask("nx.b.c.ent", "nx.ent", "nx.y.ent2")

	// Wildcards at several depths, with some types only, CNAME wildcards,
	// and a wildcard that is an empty non-terminal.
	g.add("*.w1", 3600, A, "192.0.2.60")
	g.add("*.w1", 3600, TXT, `"wildcard one"`)
	g.add("host.w1", 3600, AAAA, "2001:db8::61")
	g.add("sub.*.w1", 3600, TXT, `"below a wildcard"`)
	g.add("*.d2.w2", 900, AAAA, "2001:db8::62")
	g.add("*.wc", 1800, CN, "www."+o)
	g.add("*.wl", 600, CN, "loop.wl."+o)
	g.add("x.*.we", 3600, A, "192.0.2.63")
	g.add("a.b.*.w1", 3600, A, "192.0.2.64")
	g.ask("foo.w1", "a.b.w1", "host.w1", "x.host.w1", "nx.sub.*.w1", "nx.*.w1", "b.*.w1",
		"foo.d2.w2", "a.b.d2.w2", "d2.w2", "nx.w2",
		"foo.wc", "a.b.wc", "foo.wl", "loop.wl", "foo.we", "*.we", "a.x.*.we")

	// Delegations: glue, occluded names, a wildcard and a cut below the cut,
	// DS at a cut, data beside the NS at a cut.
	g.add("del1", 3600, NS, "ns.del1."+o)
	g.add("del1", 3600, NS, "ns2.del1."+o)
	g.add("del1", 3600, NS, "ns1."+o)
	g.add("del1", 3600, DS, "12345 8 2 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF")
	g.add("ns.del1", 3600, A, "192.0.2.100")
	g.add("ns.del1", 3600, AAAA, "2001:db8::100")
	g.add("deep.ns.del1", 3600, A, "192.0.2.101")
	g.add("*.del1", 3600, A, "192.0.2.102")
	g.add("inner.del1", 3600, NS, "ns.inner.del1."+o)
	g.add("ns.inner.del1", 3600, A, "192.0.2.103")
	g.add("del2", 7200, NS, "ns.example-dns.net.")
	g.add("del2", 7200, NS, "ns.example-dns.org.")
	g.add("del3", 3600, NS, "ns.del3."+o)
	g.add("del3", 3600, A, "192.0.2.104")
	g.add("ns.del3", 3600, A, "192.0.2.105")
	g.add("a.b.del4", 3600, NS, "ns1."+o)
	g.ask("x.del1", "a.b.del1", "ns2.del1", "x.inner.del1", "x.del2", "x.y.del3", "b.del4", "x.a.b.del4", "nx.b.del4")

	// CNAME chains: plain, loops, into a wildcard, a delegation, a cut's DS,
	// an empty non-terminal, a missing name, the apex, out of the zone.
	g.add("c1", 3600, CN, "c2."+o)
	g.add("c2", 3600, CN, "c3."+o)
	g.add("c3", 3600, CN, "www."+o)
	g.add("loop1", 3600, CN, "loop2."+o)
	g.add("loop2", 3600, CN, "loop3."+o)
	g.add("loop3", 3600, CN, "loop1."+o)
	g.add("self", 3600, CN, "self."+o)
	g.add("cwild", 3600, CN, "foo.w1."+o)
	g.add("cwc", 3600, CN, "bar.wc."+o)
	g.add("cwl", 3600, CN, "x.wl."+o)
	g.add("cdel", 3600, CN, "host.del1."+o)
	g.add("cdel2", 3600, CN, "del2."+o)
	g.add("cent", 3600, CN, "c.ent."+o)
	g.add("cnx", 3600, CN, "nothere."+o)
	g.add("cnx2", 3600, CN, "nothere.www."+o)
	g.add("capex", 3600, CN, o)
	g.add("cext", 3600, CN, "www.example-ext.net.")
	g.add("cmixed", 3600, CN, "MIXED."+strings.ToUpper(o))
	g.add("cc1", 3600, CN, "c1."+o)
	g.ask("x.c1", "x.cwild")

	// Repeated RRs are dropped (the TTL of the first one stays); RRs of one
	// RRset with different TTLs keep their own; TXT data is case-sensitive.
	g.raw = append(g.raw,
		"dup."+o+" 600 IN A 192.0.2.70",
		"dup."+o+" 600 IN A 192.0.2.70",
		"DUP."+o+" 60 IN A 192.0.2.70",
		"dup."+o+" 600 IN A 192.0.2.71",
		"ttl."+o+" 600 IN A 192.0.2.72",
		"ttl."+o+" 60 IN A 192.0.2.73",
		"txt."+o+` 600 IN TXT "case"`,
		"txt."+o+` 600 IN TXT "CASE"`,
		"cdup."+o+" 600 IN CNAME www."+o,
		"cdup."+o+" 600 IN CNAME WWW."+o,
	)
	g.ask("dup", "ttl", "txt", "cdup")

	// DNAMEs (RFC 6672): beside other data, into the zone (to an existing
	// name, under which the substituted names are missing, and to a
	// wildcard's parent), out of the zone, a loop, a target below its own
	// owner, and a CNAME into a DNAME's subtree. No name is below an owner,
	// and none is at a zone cut (Knot refuses a zone with NS beside DNAME).
	const DN = dns.TypeDNAME
	g.add("dn1", 3600, DN, "www."+o)
	g.add("dn1", 3600, TXT, `"beside a dname"`)
	g.add("dn2", 1800, DN, "w1."+o)
	g.add("dn3", 3600, DN, "example-ext.net.")
	g.add("dnl1", 3600, DN, "dnl2."+o)
	g.add("dnl2", 3600, DN, "dnl1."+o)
	g.add("dnself", 3600, DN, "x.dnself."+o)
	g.add("cdn", 3600, CN, "host.dn2."+o)
	g.ask("x.dn1", "a.b.dn1", "host.dn2", "foo.dn2", "sub.*.dn2", "x.dn3", "x.dnl1", "x.dnself", "Mixed.DN2")
}

// random adds n names of random shape and content.
func (g *generator) random(n int) {
	o := g.origin
	parents := []string{"", "", "", "p1", "p2", "q.p3", "r.s.p4", "w1", "d2.w2"}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("r%d", i)
		if p := parents[g.rng.IntN(len(parents))]; p != "" {
			name += "." + p
		}
		if g.rng.IntN(8) == 0 {
			name = strings.ToUpper(name)
		}
		ttl := uint32(60 * (1 + g.rng.IntN(60)))
		switch k := g.rng.IntN(20); {
		case k < 2: // a CNAME somewhere: another random name, the fixture, nowhere
			targets := []string{fmt.Sprintf("r%d.%s", g.rng.IntN(n+1), o), "www." + o, "foo.w1." + o, "nothere." + o, "host.del1." + o, "www.example-ext.org."}
			g.add(name, ttl, dns.TypeCNAME, targets[g.rng.IntN(len(targets))])
		case k == 2: // a wildcard beside the name
			g.add("*."+name, ttl, dns.TypeTXT, fmt.Sprintf(`"wild %d"`, i))
			g.ask("x."+name, "y.z."+name)
		case k == 3: // a delegation with glue below it
			g.add(name, ttl, dns.TypeNS, "ns."+g.abs(name))
			g.add("ns."+name, ttl, dns.TypeA, fmt.Sprintf("198.51.100.%d", g.rng.IntN(256)))
			g.ask("x." + name)
		default:
			for _, t := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeSRV} {
				if g.rng.IntN(3) != 0 {
					continue
				}
				for j := 0; j <= g.rng.IntN(3); j++ {
					g.add(name, ttl, t, g.rdata(t))
				}
			}
			if len(g.rrsets[dns.CanonicalName(g.abs(name))]) == 0 {
				g.add(name, ttl, dns.TypeA, g.rdata(dns.TypeA))
			}
		}
	}
	g.ask("nx1", "nx2.p1", "nx.q.p3", "q.p3", "s.p4", "nx.s.p4", "p4", "nx."+fmt.Sprintf("r%d", g.rng.IntN(n+1)))
}

func (g *generator) rdata(t uint16) string {
	r := g.rng
	switch t {
	case dns.TypeA:
		return fmt.Sprintf("198.51.100.%d", r.IntN(256))
	case dns.TypeAAAA:
		return fmt.Sprintf("2001:db8:1::%x", r.IntN(65536))
	case dns.TypeTXT:
		return fmt.Sprintf(`"text %d"`, r.IntN(1000))
	case dns.TypeMX:
		return fmt.Sprintf("%d mail.%s", 10*r.IntN(5), g.origin)
	case dns.TypeSRV:
		return fmt.Sprintf("0 %d %d www.%s", r.IntN(100), 1024+r.IntN(1000), g.origin)
	}
	panic("no rdata for " + dns.TypeToString[t])
}

// text renders the zone file, SOA first.
func (g *generator) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ORIGIN %s\n$TTL 3600\n", g.origin)
	for _, key := range g.owners {
		types := g.rrsets[key]
		for _, t := range sortedTypes(types) {
			set := types[t]
			for i, r := range set.rdata {
				fmt.Fprintf(&b, "%s\t%d\tIN\t%s\t%s\n", set.spell[i], set.ttl, dns.TypeToString[t], r)
			}
		}
	}
	for _, l := range g.raw {
		fmt.Fprintln(&b, l)
	}
	return b.String()
}

func sortedTypes(types map[uint16]*rrset) []uint16 {
	ts := make([]uint16, 0, len(types))
	for t := range types {
		ts = append(ts, t)
	}
	// The SOA first, the rest by number.
	slices.SortFunc(ts, func(a, b uint16) int {
		switch {
		case a == dns.TypeSOA:
			return -1
		case b == dns.TypeSOA:
			return 1
		}
		return int(a) - int(b)
	})
	return ts
}

// queries returns every owner name, its ancestors (empty non-terminals
// among them) and the extra names, each for all qtypes, in random 0x20 case.
func (g *generator) queries() []Query {
	seen := map[string]bool{}
	var names []string
	addName := func(n string) {
		if !seen[n] && dns.IsSubDomain(g.origin, n) {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, key := range g.owners {
		for n := key; ; {
			addName(n)
			if n == g.origin {
				break
			}
			i, _ := dns.NextLabel(n, 0)
			n = n[i:]
		}
	}
	for _, n := range g.extra {
		addName(n)
	}
	var qs []Query
	for _, n := range names {
		for _, t := range qtypes {
			qs = append(qs, Query{Name: g.mixCase(n), Type: t})
		}
	}
	return qs
}

// mixCase flips the case of letters at random (draft-vixie-dnsext-dns0x20).
func (g *generator) mixCase(name string) string {
	b := []byte(name)
	for i, c := range b {
		if 'a' <= c && c <= 'z' && g.rng.IntN(2) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
