package zone

import (
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// A zone with DNAMEs (RFC 6672): beside other data, pointing inside and
// outside the zone, in a loop, below their own owner, at a zone cut and
// below one.
const dnameOrg = `$ORIGIN example.org.
@          3600 IN SOA  ns1.example.org. hostmaster.example.org. 2024010101 7200 3600 1209600 300
@          3600 IN NS   ns1.example.org.
ns1        3600 IN A    192.0.2.53
www        3600 IN A    192.0.2.80
old        1800 IN DNAME new.example.org.
old        3600 IN TXT  "beside"
new        3600 IN A    192.0.2.1
host.new   3600 IN A    192.0.2.2
ext        3600 IN DNAME example.net.
selfd      3600 IN DNAME x.selfd.example.org.
loopa      3600 IN DNAME loopb.example.org.
loopb      3600 IN DNAME loopa.example.org.
cn         3600 IN CNAME a.old
sub        3600 IN NS   ns.sub
ns.sub     3600 IN A    192.0.2.100
deleg      3600 IN NS   ns.sub
deleg      3600 IN DNAME new.example.org.
occl.sub   3600 IN DNAME new.example.org.
`

var (
	dnOld    = test.DNAME("old.example.org. 1800 IN DNAME new.example.org.")
	dnNS     = []dns.RR{test.NS("example.org. 3600 IN NS ns1.example.org.")}
	dnSOA    = []dns.RR{test.SOA("example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. 2024010101 7200 3600 1209600 300")}
	dnDeleg  = []dns.RR{test.NS("deleg.example.org. 3600 IN NS ns.sub.example.org.")}
	dnSub    = []dns.RR{test.NS("sub.example.org. 3600 IN NS ns.sub.example.org.")}
	dnSubGlu = []dns.RR{test.A("ns.sub.example.org. 3600 IN A 192.0.2.100")}
)

// The expectations are NSD 4.6's answers to the same queries of the same
// zone (as BIND's and Knot's, for these cases).
var dnameCases = []test.Case{
	// Substitution, the synthesized CNAME with the DNAME's TTL, followed.
	{Qname: "host.old.example.org.", Qtype: dns.TypeA, Authoritative: true,
		Answer: []dns.RR{dnOld, test.CNAME("host.old.example.org. 1800 IN CNAME host.new.example.org."), test.A("host.new.example.org. 3600 IN A 192.0.2.2")},
		Ns:     dnNS},
	// The substituted name does not exist: NXDOMAIN, as for a CNAME.
	{Qname: "a.b.old.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError,
		Answer: []dns.RR{dnOld, test.CNAME("a.b.old.example.org. 1800 IN CNAME a.b.new.example.org.")}, Ns: dnSOA},
	// The owner itself is not substituted.
	{Qname: "old.example.org.", Qtype: dns.TypeA, Authoritative: true, Ns: dnSOA},
	{Qname: "old.example.org.", Qtype: dns.TypeTXT, Authoritative: true, Answer: []dns.RR{test.TXT(`old.example.org. 3600 IN TXT "beside"`)}, Ns: dnNS},
	{Qname: "old.example.org.", Qtype: dns.TypeDNAME, Authoritative: true, Answer: []dns.RR{dnOld}, Ns: dnNS},
	// Any type below the owner, DNAME and ANY included; a CNAME query ends
	// with the synthesized CNAME, without authority.
	{Qname: "x.old.example.org.", Qtype: dns.TypeDNAME, Authoritative: true, Rcode: dns.RcodeNameError,
		Answer: []dns.RR{dnOld, test.CNAME("x.old.example.org. 1800 IN CNAME x.new.example.org.")}, Ns: dnSOA},
	{Qname: "x.old.example.org.", Qtype: dns.TypeANY, Authoritative: true, Rcode: dns.RcodeNameError,
		Answer: []dns.RR{dnOld, test.CNAME("x.old.example.org. 1800 IN CNAME x.new.example.org.")}, Ns: dnSOA},
	{Qname: "x.old.example.org.", Qtype: dns.TypeCNAME, Authoritative: true,
		Answer: []dns.RR{dnOld, test.CNAME("x.old.example.org. 1800 IN CNAME x.new.example.org.")}},
	// A CNAME into the DNAME's subtree.
	{Qname: "cn.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError,
		Answer: []dns.RR{test.CNAME("cn.example.org. 3600 IN CNAME a.old.example.org."), dnOld,
			test.CNAME("a.old.example.org. 1800 IN CNAME a.new.example.org.")}, Ns: dnSOA},
	// Out of the zone: the chain ends, no authority.
	{Qname: "a.ext.example.org.", Qtype: dns.TypeA, Authoritative: true,
		Answer: []dns.RR{test.DNAME("ext.example.org. 3600 IN DNAME example.net."), test.CNAME("a.ext.example.org. 3600 IN CNAME a.example.net.")}},
	// A loop, and a target below its own owner: each DNAME once.
	{Qname: "a.loopa.example.org.", Qtype: dns.TypeA, Authoritative: true,
		Answer: []dns.RR{test.DNAME("loopa.example.org. 3600 IN DNAME loopb.example.org."), test.CNAME("a.loopa.example.org. 3600 IN CNAME a.loopb.example.org."),
			test.DNAME("loopb.example.org. 3600 IN DNAME loopa.example.org."), test.CNAME("a.loopb.example.org. 3600 IN CNAME a.loopa.example.org.")}},
	{Qname: "a.selfd.example.org.", Qtype: dns.TypeA, Authoritative: true,
		Answer: []dns.RR{test.DNAME("selfd.example.org. 3600 IN DNAME x.selfd.example.org."), test.CNAME("a.selfd.example.org. 3600 IN CNAME a.x.selfd.example.org.")}},
	// A zone cut at or above a DNAME: the referral wins.
	{Qname: "a.deleg.example.org.", Qtype: dns.TypeA, Ns: dnDeleg, Extra: dnSubGlu},
	{Qname: "deleg.example.org.", Qtype: dns.TypeDNAME, Ns: dnDeleg, Extra: dnSubGlu},
	{Qname: "a.occl.sub.example.org.", Qtype: dns.TypeA, Ns: dnSub, Extra: dnSubGlu},
	// Other names are not affected.
	{Qname: "www.example.org.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{test.A("www.example.org. 3600 IN A 192.0.2.80")}, Ns: dnNS},
	{Qname: "none.example.org.", Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeNameError, Ns: dnSOA},
}

func TestDNAME(t *testing.T) {
	check(t, load(t, "example.org.", dnameOrg), dnameCases)
}

// TestDNAMEApex: a DNAME at the apex renames every name below it (the case
// the differential tests found: bankcard.net. NS in a zone whose apex net.
// holds a DNAME).
func TestDNAMEApex(t *testing.T) {
	check(t, load(t, "net.", dnameApex), dnameApexCases)
}

const dnameApex = `$ORIGIN net.
@  3600 IN SOA ns1.net. hostmaster.net. 1 7200 3600 1209600 300
@  3600 IN NS  ns1.net.
@  3600 IN DNAME bank.bankcard.bar.
`

var (
	apexDNAME      = test.DNAME("net. 3600 IN DNAME bank.bankcard.bar.")
	dnameApexCases = []test.Case{
		{Qname: "bankcard.net.", Qtype: dns.TypeNS, Authoritative: true,
			Answer: []dns.RR{apexDNAME, test.CNAME("bankcard.net. 3600 IN CNAME bankcard.bank.bankcard.bar.")}},
		{Qname: "x.y.net.", Qtype: dns.TypeA, Authoritative: true,
			Answer: []dns.RR{apexDNAME, test.CNAME("x.y.net. 3600 IN CNAME x.y.bank.bankcard.bar.")}},
		{Qname: "net.", Qtype: dns.TypeNS, Authoritative: true, Answer: []dns.RR{test.NS("net. 3600 IN NS ns1.net.")}},
		{Qname: "net.", Qtype: dns.TypeDNAME, Authoritative: true, Answer: []dns.RR{apexDNAME}, Ns: []dns.RR{test.NS("net. 3600 IN NS ns1.net.")}},
	}
)

// A DNAME whose target is an ancestor of its owner applies again to the
// name it synthesized, as BIND, Knot, NSD and PowerDNS answer: the DNAME
// RRset once, a CNAME per substitution, then the last name's answer.
const dnameUp = `$ORIGIN uni.com.
@  3600 IN SOA ns1.uni.com. hostmaster.uni.com. 1 7200 3600 1209600 300
@  3600 IN NS  ns1.uni.com.
@  3600 IN AAAA 2001:db8::1
@  3600 IN DNAME com.
`

const dnameUpBar = `$ORIGIN bar.
@  3600 IN SOA ns1.bar. hostmaster.bar. 1 7200 3600 1209600 300
@  3600 IN NS  ns1.bar.
ns1 3600 IN A  192.0.2.53
bankcard 3600 IN DNAME bar.
`

var (
	uniDNAME     = test.DNAME("uni.com. 3600 IN DNAME com.")
	dnameUpCases = []test.Case{
		{Qname: "uni.uni.uni.com.", Qtype: dns.TypeNS, Authoritative: true,
			Answer: []dns.RR{uniDNAME,
				test.CNAME("uni.uni.uni.com. 3600 IN CNAME uni.uni.com."),
				test.CNAME("uni.uni.com. 3600 IN CNAME uni.com."),
				test.NS("uni.com. 3600 IN NS ns1.uni.com.")}},
		{Qname: "uni.uni.com.", Qtype: dns.TypeAAAA, Authoritative: true,
			Answer: []dns.RR{uniDNAME, test.CNAME("uni.uni.com. 3600 IN CNAME uni.com."), test.AAAA("uni.com. 3600 IN AAAA 2001:db8::1")},
			Ns:     []dns.RR{test.NS("uni.com. 3600 IN NS ns1.uni.com.")}},
		{Qname: "www.uni.com.", Qtype: dns.TypeA, Authoritative: true,
			Answer: []dns.RR{uniDNAME, test.CNAME("www.uni.com. 3600 IN CNAME www.com.")}},
	}
	barDNAME        = test.DNAME("bankcard.bar. 3600 IN DNAME bar.")
	dnameUpBarCases = []test.Case{
		{Qname: "example.bankcard.bankcard.bar.", Qtype: dns.TypeNS, Authoritative: true, Rcode: dns.RcodeNameError,
			Answer: []dns.RR{barDNAME,
				test.CNAME("example.bankcard.bankcard.bar. 3600 IN CNAME example.bankcard.bar."),
				test.CNAME("example.bankcard.bar. 3600 IN CNAME example.bar.")},
			Ns: []dns.RR{test.SOA("bar. 300 IN SOA ns1.bar. hostmaster.bar. 1 7200 3600 1209600 300")}},
		{Qname: "ns1.bankcard.bankcard.bar.", Qtype: dns.TypeA, Authoritative: true,
			Answer: []dns.RR{barDNAME,
				test.CNAME("ns1.bankcard.bankcard.bar. 3600 IN CNAME ns1.bankcard.bar."),
				test.CNAME("ns1.bankcard.bar. 3600 IN CNAME ns1.bar."),
				test.A("ns1.bar. 3600 IN A 192.0.2.53")},
			Ns: []dns.RR{test.NS("bar. 3600 IN NS ns1.bar.")}},
	}
)

// TestDNAMEUpward: a DNAME to an ancestor of its owner applies to the
// names it synthesizes until they leave its subtree.
func TestDNAMEUpward(t *testing.T) {
	check(t, load(t, "uni.com.", dnameUp), dnameUpCases)
	check(t, load(t, "bar.", dnameUpBar), dnameUpBarCases)
}

// TestDNAMETooLong: a substituted name over 255 octets is YXDOMAIN with the
// DNAME alone (RFC 6672 §2.2).
func TestDNAMETooLong(t *testing.T) {
	z := load(t, "example.org.", dnameOrg)
	qname := "selfd.example.org."
	for len(qname)+62 <= 254 {
		qname = strings.Repeat("a", 61) + "." + qname
	}
	if rest := 254 - len(qname) - 1; rest > 0 {
		qname = strings.Repeat("b", rest) + "." + qname
	}
	check(t, z, []test.Case{{Qname: qname, Qtype: dns.TypeA, Authoritative: true, Rcode: dns.RcodeYXDomain,
		Answer: []dns.RR{test.DNAME("selfd.example.org. 3600 IN DNAME x.selfd.example.org.")}}})
}

// TestDNAMECase: the synthesized CNAME is owned by the query name as asked;
// its target is in lower case, as NSD makes it.
func TestDNAMECase(t *testing.T) {
	z := load(t, "example.org.", dnameOrg)
	m := lookup(z, test.Case{Qname: "HoSt.OLD.example.org.", Qtype: dns.TypeA})
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 3 {
		t.Fatalf("expected the DNAME, the CNAME and the A, got %v", m)
	}
	c, ok := m.Answer[1].(*dns.CNAME)
	if !ok || c.Hdr.Name != "HoSt.OLD.example.org." || c.Target != "host.new.example.org." {
		t.Errorf("expected HoSt.OLD.example.org. CNAME host.new.example.org., got %v", m.Answer[1])
	}
}
