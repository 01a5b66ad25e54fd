package zone

import (
	"sort"
	"testing"

	"github.com/coredns/coredns/plugin/test"

	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// load returns a Zone holding the zone file text.
func load(t testing.TB, origin, text string) *Zone {
	t.Helper()
	z := New(origin)
	z.Load(dnsdiff.ParseZone(t, origin, text))
	return z
}

// lookup answers tc from z as a server would.
func lookup(z *Zone, tc test.Case) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(tc.Msg())
	z.Lookup(m, dns.Fqdn(tc.Qname), tc.Qtype)
	return m
}

// check runs the cases against z; test.Case does not check AA, so check does.
func check(t *testing.T, z *Zone, cases []test.Case) {
	t.Helper()
	for _, tc := range cases {
		// SortAndCheck sorts the response's sections, not the expected ones.
		for _, sec := range [][]dns.RR{tc.Answer, tc.Ns, tc.Extra} {
			sort.Sort(test.RRSet(sec))
		}
		resp := lookup(z, tc)
		name := tc.Qname + " " + dns.TypeToString[tc.Qtype]
		if err := test.SortAndCheck(resp, tc); err != nil {
			t.Errorf("%s: %v\n%s", name, err, resp)
			continue
		}
		if resp.Authoritative != tc.Authoritative {
			t.Errorf("%s: expected AA %t, got %t", name, tc.Authoritative, resp.Authoritative)
		}
	}
}

// eachNode calls f with every node (data or empty non-terminal) of z's
// current version, in trie order.
func eachNode(z *Zone, f func(*node)) {
	var walk func(t *tnode)
	walk = func(t *tnode) {
		for _, e := range t.ents {
			if c := e.child(); c != nil {
				walk(c)
			} else {
				f(e.val())
			}
		}
	}
	if r := z.load().names.root; r != nil {
		walk(r)
	}
}
