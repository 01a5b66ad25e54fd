package zone

import (
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

const exampleOrg = `$ORIGIN example.org.
@          3600 IN SOA  ns1.example.org. hostmaster.example.org. 2024010101 7200 3600 1209600 300
@          3600 IN NS   ns1.example.org.
@          3600 IN NS   ns2.example.net.
@          3600 IN MX   10 mail.example.org.
@          3600 IN DNSKEY 257 3 8 AwEAAag=
ns1        3600 IN A    192.0.2.53
mail       3600 IN A    192.0.2.25
www        3600 IN A    192.0.2.80
www        3600 IN AAAA 2001:db8::80
www        3600 IN TXT  "web"
a.b.c.ent  3600 IN A    192.0.2.9
c1         3600 IN CNAME c2
c2         3600 IN CNAME www
loop1      3600 IN CNAME loop2
loop2      3600 IN CNAME loop1
self       3600 IN CNAME self
cext       3600 IN CNAME www.example.net.
cnx        3600 IN CNAME nothere.www
capex      3600 IN CNAME @
*.w        1800 IN CNAME www
cw         3600 IN CNAME foo.w
*.wl       3600 IN CNAME foo.wl
*.nd       3600 IN AAAA 2001:db8::1
cnd        3600 IN CNAME x.nd
cdel       3600 IN CNAME host.sub
cds        3600 IN CNAME sub
sub        3600 IN NS   ns.sub
sub        3600 IN NS   ns1
sub        3600 IN DS   12345 8 2 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF
ns.sub     3600 IN A    192.0.2.100
ns.sub     3600 IN AAAA 2001:db8::100
deep.ns.sub 3600 IN A   192.0.2.101
*.sub      3600 IN A    192.0.2.102
inner.sub  3600 IN NS   ns.inner.sub
nods       3600 IN NS   ns.elsewhere.net.
`

var (
	orgNS = []dns.RR{
		test.NS("example.org. 3600 IN NS ns1.example.org."),
		test.NS("example.org. 3600 IN NS ns2.example.net."),
	}
	orgSOA   = []dns.RR{test.SOA("example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. 2024010101 7200 3600 1209600 300")}
	orgWWW   = test.A("www.example.org. 3600 IN A 192.0.2.80")
	subNS    = []dns.RR{test.NS("sub.example.org. 3600 IN NS ns.sub.example.org."), test.NS("sub.example.org. 3600 IN NS ns1.example.org.")}
	subGlue  = []dns.RR{test.A("ns.sub.example.org. 3600 IN A 192.0.2.100"), test.AAAA("ns.sub.example.org. 3600 IN AAAA 2001:db8::100"), test.A("ns1.example.org. 3600 IN A 192.0.2.53")}
	cnameC1  = test.CNAME("c1.example.org. 3600 IN CNAME c2.example.org.")
	cnameC2  = test.CNAME("c2.example.org. 3600 IN CNAME www.example.org.")
	cnameL1  = test.CNAME("loop1.example.org. 3600 IN CNAME loop2.example.org.")
	cnameL2  = test.CNAME("loop2.example.org. 3600 IN CNAME loop1.example.org.")
	wlTarget = "foo.wl.example.org."
)

// Expectations are NSD's answers (4.6, default configuration).
var lookupCases = []test.Case{
	// Exact matches, NODATA, NXDOMAIN.
	{Qname: "www.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{orgWWW}, Ns: orgNS},
	{Qname: "www.example.org.", Qtype: dns.TypeMX, Authoritative: true, Ns: orgSOA},
	{Qname: "nope.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA},
	{Qname: "deeper.nope.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA},
	{Qname: "x.www.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA},
	// Case does not matter; the stored owner name is answered.
	{Qname: "WwW.ExAmPlE.oRg.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{orgWWW}, Ns: orgNS},
	{Qname: "NOPE.example.ORG.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA},

	// Apex.
	{Qname: "example.org.", Qtype: dns.TypeSOA, Authoritative: true, Answer: []dns.RR{test.SOA("example.org. 3600 IN SOA ns1.example.org. hostmaster.example.org. 2024010101 7200 3600 1209600 300")}, Ns: orgNS},
	{Qname: "example.org.", Qtype: dns.TypeNS, Authoritative: true, Answer: orgNS},
	{Qname: "example.org.", Qtype: dns.TypeMX, Authoritative: true, Answer: []dns.RR{test.MX("example.org. 3600 IN MX 10 mail.example.org.")}, Ns: orgNS},
	{Qname: "example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA},
	{Qname: "example.org.", Qtype: dns.TypeDS, Authoritative: true, Ns: orgSOA},
	{Qname: "example.org.", Qtype: dns.TypeCNAME, Authoritative: true, Ns: orgSOA},
	// No NS in authority for DNSKEY and DS answers.
	{Qname: "example.org.", Qtype: dns.TypeDNSKEY, Authoritative: true, Answer: []dns.RR{test.DNSKEY("example.org. 3600 IN DNSKEY 257 3 8 AwEAAag=")}},

	// Empty non-terminals.
	{Qname: "ent.example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA},
	{Qname: "c.ent.example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA},
	{Qname: "b.c.ent.example.org.", Qtype: dns.TypeTXT, Authoritative: true, Ns: orgSOA},
	{Qname: "x.c.ent.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA},
	{Qname: "a.b.c.ent.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("a.b.c.ent.example.org. 3600 IN A 192.0.2.9")}, Ns: orgNS},

	// CNAME chains.
	{Qname: "c1.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{cnameC1, cnameC2, orgWWW}, Ns: orgNS},
	{Qname: "c1.example.org.", Qtype: dns.TypeCNAME, Authoritative: true, Answer: []dns.RR{cnameC1}, Ns: orgNS},
	{Qname: "c1.example.org.", Qtype: dns.TypeMX, Authoritative: true, Answer: []dns.RR{cnameC1, cnameC2}, Ns: orgSOA},
	{Qname: "cext.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("cext.example.org. 3600 IN CNAME www.example.net.")}},
	// RFC 6604: the rcode is the last name's.
	{Qname: "cnx.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Answer: []dns.RR{test.CNAME("cnx.example.org. 3600 IN CNAME nothere.www.example.org.")}, Ns: orgSOA},
	// A chain to the apex NS does not repeat the NS in authority.
	{Qname: "capex.example.org.", Qtype: dns.TypeNS, Authoritative: true, Answer: append([]dns.RR{test.CNAME("capex.example.org. 3600 IN CNAME example.org.")}, orgNS...)},
	{Qname: "capex.example.org.", Qtype: dns.TypeDNSKEY, Authoritative: true, Answer: []dns.RR{test.CNAME("capex.example.org. 3600 IN CNAME example.org."), test.DNSKEY("example.org. 3600 IN DNSKEY 257 3 8 AwEAAag=")}},

	// CNAME loops end when an RRset would be added again; no authority.
	{Qname: "loop1.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{cnameL1, cnameL2}},
	{Qname: "self.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("self.example.org. 3600 IN CNAME self.example.org.")}},
	{Qname: "self.example.org.", Qtype: dns.TypeCNAME, Authoritative: true, Answer: []dns.RR{test.CNAME("self.example.org. 3600 IN CNAME self.example.org.")}, Ns: orgNS},
	// A wildcard CNAME loop: the query name and the same name reached as a
	// CNAME target count as different owners (NSD's domain numbers).
	{Qname: "x.wl.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{
		test.CNAME(wlTarget + " 3600 IN CNAME " + wlTarget),
		test.CNAME("x.wl.example.org. 3600 IN CNAME " + wlTarget),
	}},
	{Qname: wlTarget, Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{
		test.CNAME(wlTarget + " 3600 IN CNAME " + wlTarget),
		test.CNAME(wlTarget + " 3600 IN CNAME " + wlTarget),
	}},

	// Wildcards: synthesized owner is the query name (as asked), CNAME
	// wildcards, NODATA from a wildcard, chains into wildcards.
	{Qname: "Foo.W.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("Foo.W.example.org. 1800 IN CNAME www.example.org."), orgWWW}, Ns: orgNS},
	{Qname: "foo.w.example.org.", Qtype: dns.TypeCNAME, Authoritative: true, Answer: []dns.RR{test.CNAME("foo.w.example.org. 1800 IN CNAME www.example.org.")}, Ns: orgNS},
	{Qname: "cw.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{
		test.CNAME("cw.example.org. 3600 IN CNAME foo.w.example.org."),
		test.CNAME("foo.w.example.org. 1800 IN CNAME www.example.org."),
		orgWWW,
	}, Ns: orgNS},
	{Qname: "a.b.nd.example.org.", Qtype: dns.TypeAAAA, Authoritative: true, Answer: []dns.RR{test.AAAA("a.b.nd.example.org. 3600 IN AAAA 2001:db8::1")}, Ns: orgNS},
	{Qname: "a.nd.example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: orgSOA},
	{Qname: "nd.example.org.", Qtype: dns.TypeAAAA, Authoritative: true, Ns: orgSOA},
	{Qname: "cnd.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("cnd.example.org. 3600 IN CNAME x.nd.example.org.")}, Ns: orgSOA},
	{Qname: "cnd.example.org.", Qtype: dns.TypeAAAA, Authoritative: true, Answer: []dns.RR{
		test.CNAME("cnd.example.org. 3600 IN CNAME x.nd.example.org."),
		test.AAAA("x.nd.example.org. 3600 IN AAAA 2001:db8::1"),
	}, Ns: orgNS},

	// Delegations: referral with glue (occluded names included), AA clear;
	// everything below the cut, wildcards and nested cuts included.
	{Qname: "sub.example.org.", Qtype: dns.TypeA, Ns: subNS, Extra: subGlue},
	{Qname: "sub.example.org.", Qtype: dns.TypeNS, Ns: subNS, Extra: subGlue},
	{Qname: "host.sub.example.org.", Qtype: dns.TypeA, Ns: subNS, Extra: subGlue},
	{Qname: "ns.sub.example.org.", Qtype: dns.TypeA, Ns: subNS, Extra: subGlue},
	{Qname: "deep.ns.sub.example.org.", Qtype: dns.TypeA, Ns: subNS, Extra: subGlue},
	{Qname: "x.inner.sub.example.org.", Qtype: dns.TypeA, Ns: subNS, Extra: subGlue},
	{Qname: "inner.sub.example.org.", Qtype: dns.TypeDS, Ns: subNS, Extra: subGlue},
	{Qname: "x.sub.example.org.", Qtype: dns.TypeDS, Ns: subNS, Extra: subGlue},
	{Qname: "nods.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{test.NS("nods.example.org. 3600 IN NS ns.elsewhere.net.")}},
	// DS at the cut is answered by the parent, authoritatively.
	{Qname: "sub.example.org.", Qtype: dns.TypeDS, Authoritative: true, Answer: []dns.RR{test.DS("sub.example.org. 3600 IN DS 12345 8 2 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF")}},
	{Qname: "nods.example.org.", Qtype: dns.TypeDS, Authoritative: true, Ns: orgSOA},
	// A CNAME into a delegation: the CNAME, then the referral, AA set.
	{Qname: "cdel.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.CNAME("cdel.example.org. 3600 IN CNAME host.sub.example.org.")}, Ns: subNS, Extra: subGlue},
	{Qname: "cds.example.org.", Qtype: dns.TypeDS, Authoritative: true, Answer: []dns.RR{
		test.CNAME("cds.example.org. 3600 IN CNAME sub.example.org."),
		test.DS("sub.example.org. 3600 IN DS 12345 8 2 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF"),
	}},
}

func TestLookup(t *testing.T) {
	check(t, load(t, "example.org.", exampleOrg), lookupCases)
}

// RFC 8482 §4.1: one RRset, picked by type, for ANY.
func TestLookupANY(t *testing.T) {
	z := load(t, "example.org.", exampleOrg+`
multi 3600 IN TXT "t"
multi 3600 IN AAAA 2001:db8::2
multi 3600 IN A 192.0.2.2
multi 3600 IN A 192.0.2.3
other 3600 IN TXT "t"
other 3600 IN SRV 0 0 1 x.example.org.
`)
	check(t, z, []test.Case{
		{Qname: "example.org.", Qtype: dns.TypeANY, Authoritative: true, Answer: []dns.RR{test.SOA("example.org. 3600 IN SOA ns1.example.org. hostmaster.example.org. 2024010101 7200 3600 1209600 300")}},
		{Qname: "multi.example.org.", Qtype: dns.TypeANY, Authoritative: true, Answer: []dns.RR{test.A("multi.example.org. 3600 IN A 192.0.2.2"), test.A("multi.example.org. 3600 IN A 192.0.2.3")}},
		{Qname: "other.example.org.", Qtype: dns.TypeANY, Authoritative: true, Answer: []dns.RR{test.TXT(`other.example.org. 3600 IN TXT "t"`)}},
		// A CNAME is the answer; it is not followed.
		{Qname: "c1.example.org.", Qtype: dns.TypeANY, Authoritative: true, Answer: []dns.RR{cnameC1}},
		{Qname: "x.nd.example.org.", Qtype: dns.TypeANY, Authoritative: true, Answer: []dns.RR{test.AAAA("x.nd.example.org. 3600 IN AAAA 2001:db8::1")}},
		{Qname: "ent.example.org.", Qtype: dns.TypeANY, Authoritative: true, Ns: orgSOA},
		{Qname: "nope.example.org.", Qtype: dns.TypeANY, Authoritative: true, Rcode: dns.RcodeNameError, Ns: orgSOA},
		{Qname: "sub.example.org.", Qtype: dns.TypeANY, Ns: subNS, Extra: subGlue},
	})
}

func TestLookupEmptyZone(t *testing.T) {
	z := New("example.org.")
	m := new(dns.Msg)
	z.Lookup(m, "www.example.org.", dns.TypeA)
	if m.Rcode != dns.RcodeServerFailure {
		t.Errorf("expected SERVFAIL without SOA, got %s", dns.RcodeToString[m.Rcode])
	}
}

func TestLookupRootZone(t *testing.T) {
	z := load(t, ".", `. 86400 IN SOA a.root-servers.net. nstld.verisign-grs.com. 1 1800 900 604800 86400
. 518400 IN NS a.root-servers.net.
org. 172800 IN NS a0.org.afilias-nst.info.
*.wild. 3600 IN A 192.0.2.1
`)
	check(t, z, []test.Case{
		{Qname: "www.example.org.", Qtype: dns.TypeA, Ns: []dns.RR{test.NS("org. 172800 IN NS a0.org.afilias-nst.info.")}},
		{Qname: "nope.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(". 86400 IN SOA a.root-servers.net. nstld.verisign-grs.com. 1 1800 900 604800 86400")}},
		{Qname: "x.wild.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("x.wild. 3600 IN A 192.0.2.1")}, Ns: []dns.RR{test.NS(". 518400 IN NS a.root-servers.net.")}},
		{Qname: ".", Qtype: dns.TypeNS, Authoritative: true, Answer: []dns.RR{test.NS(". 518400 IN NS a.root-servers.net.")}},
	})
}
