package zone

import (
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

type partitionCase struct {
	test.Case
	facts shardproto.Facts
}

var (
	final = shardproto.Facts{Kind: shardproto.Final, Origin: "example.org."}
	// absent is Absent with the closest encloser at labels labels.
	absent = func(labels uint8) shardproto.Facts {
		return shardproto.Facts{Kind: shardproto.Absent, Labels: labels, Origin: "example.org."}
	}
	// wild is absent(labels) with a wildcard answer.
	wild = func(labels uint8) shardproto.Facts {
		f := absent(labels)
		f.Wildcard = true
		return f
	}
)

var partitionCases = []partitionCase{
	// Exact matches and NODATA: as Lookup.
	{test.Case{Qname: "www.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{orgWWW}, Ns: orgNS}, final},
	{test.Case{Qname: "WwW.ExAmPlE.oRg.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{orgWWW}, Ns: orgNS}, final},
	{test.Case{Qname: "www.example.org.", Qtype: dns.TypeMX, Authoritative: true, Ns: orgSOA}, final},
	{test.Case{Qname: "example.org.", Qtype: dns.TypeNS, Authoritative: true, Answer: orgNS}, final},
	{test.Case{Qname: "example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA}, final},

	// Empty non-terminals exist.
	{test.Case{Qname: "ent.example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA}, final},
	{test.Case{Qname: "b.c.ent.example.org.", Qtype: dns.TypeTXT, Authoritative: true, Ns: orgSOA}, final},
	{test.Case{Qname: "b.c.ent.example.org.", Qtype: dns.TypeANY, Authoritative: true, Ns: orgSOA}, final},

	// A CNAME is not followed: it is the answer, without authority, NOERROR
	// even when its target does not exist.
	{test.Case{Qname: "c1.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{cnameC1}}, final},
	{test.Case{Qname: "c1.example.org.", Qtype: dns.TypeMX, Authoritative: true, Answer: []dns.RR{cnameC1}}, final},
	{test.Case{Qname: "c1.example.org.", Qtype: dns.TypeCNAME, Authoritative: true, Answer: []dns.RR{cnameC1}, Ns: orgNS}, final},
	{test.Case{Qname: "c1.example.org.", Qtype: dns.TypeANY, Authoritative: true, Answer: []dns.RR{cnameC1}}, final},
	{test.Case{Qname: "cnx.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("cnx.example.org. 3600 IN CNAME nothere.www.example.org.")}}, final},
	{test.Case{Qname: "self.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("self.example.org. 3600 IN CNAME self.example.org.")}}, final},
	{test.Case{Qname: "cdel.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("cdel.example.org. 3600 IN CNAME host.sub.example.org.")}}, final},
	{test.Case{Qname: "cds.example.org.", Qtype: dns.TypeDS, Authoritative: true, Answer: []dns.RR{test.CNAME("cds.example.org. 3600 IN CNAME sub.example.org.")}}, final},

	// Wildcards: Absent, with the closest encloser's label count and what
	// its wildcard synthesizes (a CNAME not followed either).
	{test.Case{Qname: "a.b.nd.example.org.", Qtype: dns.TypeAAAA, Authoritative: true, Answer: []dns.RR{test.AAAA("a.b.nd.example.org. 3600 IN AAAA 2001:db8::1")}, Ns: orgNS}, wild(3)},
	{test.Case{Qname: "x.nd.example.org.", Qtype: dns.TypeANY, Authoritative: true, Answer: []dns.RR{test.AAAA("x.nd.example.org. 3600 IN AAAA 2001:db8::1")}}, wild(3)},
	{test.Case{Qname: "a.nd.example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA}, wild(3)},
	{test.Case{Qname: "Foo.W.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("Foo.W.example.org. 1800 IN CNAME www.example.org.")}}, wild(3)},
	{test.Case{Qname: "foo.w.example.org.", Qtype: dns.TypeCNAME, Authoritative: true, Answer: []dns.RR{test.CNAME("foo.w.example.org. 1800 IN CNAME www.example.org.")}, Ns: orgNS}, wild(3)},
	{test.Case{Qname: "x.wl.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("x.wl.example.org. 3600 IN CNAME " + wlTarget)}}, wild(3)},
	// The wildcard's own name exists.
	{test.Case{Qname: "*.nd.example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA}, final},

	// NXDOMAIN: Absent, with the closest encloser at any depth.
	{test.Case{Qname: "nope.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA}, absent(2)},
	{test.Case{Qname: "NOPE.example.ORG.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA}, absent(2)},
	{test.Case{Qname: "a.b.c.nope.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA}, absent(2)},
	{test.Case{Qname: "x.www.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA}, absent(3)},
	{test.Case{Qname: "x.c.ent.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA}, absent(4)},
	{test.Case{Qname: "y.x.a.b.c.ent.example.org.", Qtype: dns.TypeCNAME, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA}, absent(6)},
	{test.Case{Qname: `a\.b.www.example.org.`, Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA}, absent(3)},

	// Delegations: referrals, AA clear, Final; DS at the cut is the parent's.
	{test.Case{Qname: "sub.example.org.", Qtype: dns.TypeA, Ns: subNS, Extra: subGlue}, final},
	{test.Case{Qname: "host.sub.example.org.", Qtype: dns.TypeA, Ns: subNS, Extra: subGlue}, final},
	{test.Case{Qname: "a.b.deep.ns.sub.example.org.", Qtype: dns.TypeA, Ns: subNS, Extra: subGlue}, final},
	{test.Case{Qname: "x.inner.sub.example.org.", Qtype: dns.TypeDS, Ns: subNS, Extra: subGlue}, final},
	{test.Case{Qname: "sub.example.org.", Qtype: dns.TypeDS, Authoritative: true, Answer: []dns.RR{test.DS("sub.example.org. 3600 IN DS 12345 8 2 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF")}}, final},
	{test.Case{Qname: "nods.example.org.", Qtype: dns.TypeDS, Authoritative: true, Ns: orgSOA}, final},
	{test.Case{Qname: "nods.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{test.NS("nods.example.org. 3600 IN NS ns.elsewhere.net.")}}, final},

	// Outside the zone: refused, no origin.
	{test.Case{Qname: "www.example.net.", Qtype: dns.TypeA, Rcode: dns.RcodeRefused}, shardproto.Facts{Kind: shardproto.Final}},
	{test.Case{Qname: "xexample.org.", Qtype: dns.TypeA, Rcode: dns.RcodeRefused}, shardproto.Facts{Kind: shardproto.Final}},
	{test.Case{Qname: "org.", Qtype: dns.TypeA, Rcode: dns.RcodeRefused}, shardproto.Facts{Kind: shardproto.Final}},
}

// partitionLookup answers tc from z in partition mode.
func partitionLookup(z *Zone, tc test.Case) (*dns.Msg, shardproto.Facts) {
	m := new(dns.Msg)
	m.SetReply(tc.Msg())
	f := z.Partition(m, dns.Fqdn(tc.Qname), tc.Qtype)
	return m, f
}

func checkPartition(t *testing.T, z *Zone, cases []partitionCase) {
	t.Helper()
	for _, tc := range cases {
		resp, f := partitionLookup(z, tc.Case)
		name := tc.Qname + " " + dns.TypeToString[tc.Qtype]
		if f != tc.facts {
			t.Errorf("%s: expected facts %+v, got %+v", name, tc.facts, f)
		}
		if err := test.SortAndCheck(resp, tc.Case); err != nil {
			t.Errorf("%s: %v\n%s", name, err, resp)
			continue
		}
		if resp.Authoritative != tc.Authoritative {
			t.Errorf("%s: expected AA %t, got %t", name, tc.Authoritative, resp.Authoritative)
		}
	}
}

func TestPartition(t *testing.T) {
	checkPartition(t, load(t, "example.org.", exampleOrg), partitionCases)
}

func TestPartitionRootZone(t *testing.T) {
	z := load(t, ".", `. 86400 IN SOA a.root-servers.net. nstld.verisign-grs.com. 1 1800 900 604800 86400
. 518400 IN NS a.root-servers.net.
org. 172800 IN NS a0.org.afilias-nst.info.
*.wild. 3600 IN A 192.0.2.1
`)
	rootSOA := []dns.RR{test.SOA(". 86400 IN SOA a.root-servers.net. nstld.verisign-grs.com. 1 1800 900 604800 86400")}
	rootNS := []dns.RR{test.NS(". 518400 IN NS a.root-servers.net.")}
	checkPartition(t, z, []partitionCase{
		{test.Case{Qname: "www.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{test.NS("org. 172800 IN NS a0.org.afilias-nst.info.")}}, shardproto.Facts{Kind: shardproto.Final, Origin: "."}},
		{test.Case{Qname: ".", Qtype: dns.TypeNS, Authoritative: true, Answer: rootNS}, shardproto.Facts{Kind: shardproto.Final, Origin: "."}},
		{test.Case{Qname: "nope.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: rootSOA}, shardproto.Facts{Kind: shardproto.Absent, Origin: "."}},
		{test.Case{Qname: "x.wild.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("x.wild. 3600 IN A 192.0.2.1")}, Ns: rootNS}, shardproto.Facts{Kind: shardproto.Absent, Labels: 1, Wildcard: true, Origin: "."}},
	})
}

func TestPartitionEmptyZone(t *testing.T) {
	z := New("example.org.")
	m := new(dns.Msg)
	f := z.Partition(m, "www.example.org.", dns.TypeA)
	if m.Rcode != dns.RcodeServerFailure {
		t.Errorf("expected SERVFAIL without SOA, got %s", dns.RcodeToString[m.Rcode])
	}
	if f != final {
		t.Errorf("expected facts %+v, got %+v", final, f)
	}
}

// TestPartitionProperties compares Partition with Lookup on generated zones:
// the sections are Lookup's unless Lookup followed a CNAME, and Absent
// reports the deepest existing ancestor of the query name.
func TestPartitionProperties(t *testing.T) {
	const origin = "example.com."
	for _, seed := range []int64{1, 2} {
		text, queries := dnsdiff.GenerateZone(origin, seed, dnsdiff.DefaultNames)
		rrs := dnsdiff.ParseZone(t, origin, text)
		z := New(origin)
		z.Load(rrs)

		// Every owner and its ancestors up to the origin exist.
		exists := map[string]bool{}
		for _, rr := range rrs {
			for n := dns.CanonicalName(rr.Header().Name); dns.IsSubDomain(origin, n); {
				exists[n] = true
				if n == origin {
					break
				}
				i, _ := dns.NextLabel(n, 0)
				n = n[i:]
			}
		}

		// The generated queries, and names below them that do not exist.
		seen := map[string]bool{}
		for _, q := range queries {
			if seen[q.Name] {
				continue
			}
			seen[q.Name] = true
			for _, t := range []uint16{dns.TypeA, dns.TypeCNAME, dns.TypeDS, dns.TypeANY} {
				queries = append(queries, dnsdiff.Query{Name: "nx." + q.Name, Type: t}, dnsdiff.Query{Name: "a.B.nx." + q.Name, Type: t})
			}
		}
		queries = append(queries, dnsdiff.Query{Name: "www.example.net.", Type: dns.TypeA}, dnsdiff.Query{Name: "com.", Type: dns.TypeNS})

		var finals, absents, wilds int
		for _, q := range queries {
			name := q.String()
			want := new(dns.Msg)
			z.Lookup(want, q.Name, q.Type)
			got := new(dns.Msg)
			f := z.Partition(got, q.Name, q.Type)

			if f.Kind == shardproto.Absent {
				absents++
				if f.Wildcard {
					wilds++
				}
				deepest := ""
				for n := dns.CanonicalName(q.Name); n != ""; {
					if exists[n] {
						deepest = n
						break
					}
					i, _ := dns.NextLabel(n, 0)
					n = n[i:]
				}
				if deepest == dns.CanonicalName(q.Name) {
					t.Errorf("%s: expected Final for an existing name, got %+v", name, f)
				}
				if int(f.Labels) != dns.CountLabel(deepest) {
					t.Errorf("%s: expected %d labels (%s), got %d", name, dns.CountLabel(deepest), deepest, f.Labels)
				}
				if f.Origin != origin {
					t.Errorf("%s: expected origin %s, got %q", name, origin, f.Origin)
				}
				if !f.Wildcard && got.Rcode != dns.RcodeNameError {
					t.Errorf("%s: expected NXDOMAIN without a wildcard, got %s", name, dns.RcodeToString[got.Rcode])
				}
			} else {
				finals++
				// Final: the name exists, or a referral, or a refusal.
				referral := !got.Authoritative && len(got.Ns) > 0 && got.Ns[0].Header().Rrtype == dns.TypeNS
				dname := len(got.Answer) > 0 && got.Answer[0].Header().Rrtype == dns.TypeDNAME
				if !exists[dns.CanonicalName(q.Name)] && !referral && !dname && got.Rcode != dns.RcodeRefused {
					t.Errorf("%s: expected Absent, got %+v\n%s", name, f, got)
				}
			}

			// Where Partition answers a CNAME that Lookup followed, the CNAME
			// starts Lookup's answer; everywhere else the answers are equal.
			// A CNAME that a DNAME synthesized is followed for ANY too.
			synthesized := func(a []dns.RR) bool { return len(a) >= 2 && a[len(a)-2].Header().Rrtype == dns.TypeDNAME }
			if a := got.Answer; len(a) > 0 && a[len(a)-1].Header().Rrtype == dns.TypeCNAME && q.Type != dns.TypeCNAME &&
				(q.Type != dns.TypeANY || synthesized(a)) {
				if got.Rcode != dns.RcodeSuccess || len(got.Ns) != 0 || len(got.Extra) != 0 || got.Authoritative != want.Authoritative {
					t.Errorf("%s: expected the CNAME alone, got\n%s", name, got)
				}
				if !equalRRs(a, want.Answer[:min(len(a), len(want.Answer))]) {
					t.Errorf("%s: expected the answer to start Lookup's\n%s\ngot\n%s", name, want, got)
				}
				continue
			}
			if got.Rcode != want.Rcode || got.Authoritative != want.Authoritative ||
				!equalRRs(got.Answer, want.Answer) || !equalRRs(got.Ns, want.Ns) || !equalRRs(got.Extra, want.Extra) {
				t.Errorf("%s: expected Lookup's answer\n%s\ngot\n%s", name, want, got)
			}
		}
		if finals == 0 || absents == 0 || wilds == 0 {
			t.Errorf("seed %d: expected Final, Absent and wildcard answers, got %d, %d, %d", seed, finals, absents, wilds)
		}
	}
}

// equalRRs reports whether a and b hold the same RRs in the same order.
func equalRRs(a, b []dns.RR) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].String() != b[i].String() {
			return false
		}
	}
	return true
}
