package zone

import (
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// The example zone of RFC 4592 §2.2.1.
const rfc4592Zone = `$ORIGIN example.
example.                 3600 IN  SOA   ns.example.com. hostmaster.example. 1 7200 3600 1209600 300
example.                 3600     NS    ns.example.com.
example.                 3600     NS    ns.example.net.
*.example.               3600     TXT   "this is a wildcard"
*.example.               3600     MX    10 host1.example.
sub.*.example.           3600     TXT   "this is not a wildcard"
host1.example.           3600     A     192.0.2.1
_ssh._tcp.host1.example. 3600     SRV   0 0 22 host1.example.
_ssh._tcp.host2.example. 3600     SRV   0 0 22 host1.example.
subdel.example.          3600     NS    ns.example.com.
subdel.example.          3600     NS    ns.example.net.
`

var (
	rfc4592NS = []dns.RR{
		test.NS("example. 3600 IN NS ns.example.com."),
		test.NS("example. 3600 IN NS ns.example.net."),
	}
	rfc4592SOA = []dns.RR{test.SOA("example. 300 IN SOA ns.example.com. hostmaster.example. 1 7200 3600 1209600 300")}
)

// Every example of RFC 4592 §2.2.1, and a few more on the same zone.
var rfc4592Cases = []test.Case{
	// "The following responses would be synthesized from one of the
	// wildcards in the zone":
	{
		Qname: "host3.example.", Qtype: dns.TypeMX, Authoritative: true,
		Answer: []dns.RR{test.MX("host3.example. 3600 IN MX 10 host1.example.")},
		Ns:     rfc4592NS,
	},
	{
		// "no error, but no data" because there is no A RRset at *.example.
		Qname: "host3.example.", Qtype: dns.TypeA, Authoritative: true,
		Ns: rfc4592SOA,
	},
	{
		// bar.example. does not exist, but the wildcard does.
		Qname: "foo.bar.example.", Qtype: dns.TypeTXT, Authoritative: true,
		Answer: []dns.RR{test.TXT(`foo.bar.example. 3600 IN TXT "this is a wildcard"`)},
		Ns:     rfc4592NS,
	},
	// "The following responses would not be synthesized from any of the
	// wildcards in the zone":
	{
		// host1.example. exists.
		Qname: "host1.example.", Qtype: dns.TypeMX, Authoritative: true,
		Ns: rfc4592SOA,
	},
	{
		// sub.*.example. exists.
		Qname: "sub.*.example.", Qtype: dns.TypeMX, Authoritative: true,
		Ns: rfc4592SOA,
	},
	{
		// _tcp.host1.example. exists (without data): the closest encloser
		// has no wildcard child.
		Qname: "_telnet._tcp.host1.example.", Qtype: dns.TypeSRV, Authoritative: true,
		Rcode: dns.RcodeNameError,
		Ns:    rfc4592SOA,
	},
	{
		// subdel.example. exists (and is a zone cut).
		Qname: "host.subdel.example.", Qtype: dns.TypeA,
		Ns: []dns.RR{
			test.NS("subdel.example. 3600 IN NS ns.example.com."),
			test.NS("subdel.example. 3600 IN NS ns.example.net."),
		},
	},
	{
		// *.example. exists: it is the closest encloser, and *.*.example.
		// does not exist.
		Qname: "ghost.*.example.", Qtype: dns.TypeMX, Authoritative: true,
		Rcode: dns.RcodeNameError,
		Ns:    rfc4592SOA,
	},
	// More on the same zone.
	{
		// The wildcard name itself, asked directly, is an ordinary name.
		Qname: "*.example.", Qtype: dns.TypeTXT, Authoritative: true,
		Answer: []dns.RR{test.TXT(`*.example. 3600 IN TXT "this is a wildcard"`)},
		Ns:     rfc4592NS,
	},
	{
		Qname: "*.example.", Qtype: dns.TypeA, Authoritative: true,
		Ns: rfc4592SOA,
	},
	{
		Qname: "sub.*.example.", Qtype: dns.TypeTXT, Authoritative: true,
		Answer: []dns.RR{test.TXT(`sub.*.example. 3600 IN TXT "this is not a wildcard"`)},
		Ns:     rfc4592NS,
	},
	{
		// _tcp.host1.example. is an empty non-terminal: NODATA.
		Qname: "_tcp.host1.example.", Qtype: dns.TypeA, Authoritative: true,
		Ns: rfc4592SOA,
	},
	{
		// host2.example. is an empty non-terminal too, and so not covered
		// by *.example.
		Qname: "host2.example.", Qtype: dns.TypeMX, Authoritative: true,
		Ns: rfc4592SOA,
	},
	{
		Qname: "_ssh._tcp.host2.example.", Qtype: dns.TypeSRV, Authoritative: true,
		Answer: []dns.RR{test.SRV("_ssh._tcp.host2.example. 3600 IN SRV 0 0 22 host1.example.")},
		Ns:     rfc4592NS,
	},
	{
		Qname: "subdel.example.", Qtype: dns.TypeNS,
		Ns: []dns.RR{
			test.NS("subdel.example. 3600 IN NS ns.example.com."),
			test.NS("subdel.example. 3600 IN NS ns.example.net."),
		},
	},
	{
		// DS at the cut is the parent's: NODATA, authoritatively.
		Qname: "subdel.example.", Qtype: dns.TypeDS, Authoritative: true,
		Ns: rfc4592SOA,
	},
	{
		Qname: "example.", Qtype: dns.TypeNS, Authoritative: true,
		Answer: rfc4592NS,
	},
}

func TestRFC4592(t *testing.T) {
	check(t, load(t, "example.", rfc4592Zone), rfc4592Cases)
}
