package craftroute

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// memShards answers partition-mode queries from in-memory zones, one per
// shard, as craftstore members do.
// testKey is the router key of the tests' routers and shards.
var testKey = shardproto.NewKey(testSecret)

// testSecret is router_key in the tests' Corefiles.
const testSecret = "0123456789abcdef0123456789abcdef"

type memShards map[string]*zone.Zone

func (ms memShards) exchange(_ context.Context, s *Shard, req *dns.Msg) (*dns.Msg, error) {
	z := ms[s.Name]
	m := new(dns.Msg)
	m.SetReply(req)
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(dns.DefaultMsgSize, opt.Do())
	}
	q := req.Question[0]
	if !dns.IsSubDomain(z.Origin(), dnsname.Lower(q.Name)) {
		m.Rcode = dns.RcodeRefused
		return m, nil
	}
	facts := shardproto.Requested(req)
	if facts {
		shardproto.Attach(m, z.Partition(m, dnsname.Lower(q.Name), q.Qtype))
	} else {
		z.Lookup(m, dnsname.Lower(q.Name), q.Qtype)
	}
	if shardproto.SignedRequested(req) {
		// As craftstore completes an answer the router signs (the test
		// zones' keys have a KSK for the DS).
		if err := z.Complete(m, func() []uint16 { return zone.KeyTypes(true) }); err != nil {
			return nil, err
		}
		shardproto.AttachGlue(m, z.GlueNames(m))
	}
	// As craftstore does.
	if serial, base, ok := z.Serial(); ok && (facts || hasSOA(m)) {
		shardproto.AttachSerial(m, z.Origin(), serial, base)
		shardproto.SignAnswer(m, testKey)
	}
	// As over the wire: the answer's records are the router's own.
	return m.Copy(), nil
}

// testRouter returns a router over n in-memory shards holding the zone text.
func testRouter(t testing.TB, origin, text string, n int) (*Craftroute, *zone.Zone) {
	t.Helper()
	rrs := dnsdiff.ParseZone(t, origin, text)
	whole := zone.New(origin)
	whole.Load(rrs)

	c := &Craftroute{Zones: []string{origin}, cfg: config{key: keyName}}
	c.leases.key = testKey
	var shards []*Shard
	for i := range n {
		shards = append(shards, &Shard{Name: fmt.Sprintf("s%d", i)})
	}
	c.route(t, shards...)
	c.zones, c.neg, c.changes = newZoneSet([]string{origin}), newNegCache(0), newChangeTracker()
	ms := memShards{}
	for s, part := range c.split(origin, rrs) {
		z := zone.New(origin)
		z.Load(part)
		ms[s.Name] = z
	}
	for _, s := range shards {
		if ms[s.Name] == nil {
			t.Fatalf("shard %s holds nothing", s.Name)
		}
	}
	c.ex = ms
	return c, whole
}

// resolveAgainst resolves name/qtype through c and returns what differs
// from whole's lookup ("" if nothing: rcode, AA, the sections as sets, and
// the message ID and question restored) and whether every shard was asked.
func resolveAgainst(c *Craftroute, whole *zone.Zone, name string, qtype uint16) (string, bool, error) {
	r := new(dns.Msg)
	r.SetQuestion(name, qtype)
	r.SetEdns0(1232, false)
	want := new(dns.Msg)
	want.SetReply(r)
	whole.Lookup(want, dnsname.Lower(name), qtype)
	got, b, err := c.resolveName(context.Background(), r)
	if err != nil {
		return "", b, err
	}
	if got.Id != r.Id || got.Question[0] != r.Question[0] {
		return fmt.Sprintf("id/question not restored: %v", got.Question), b, nil
	}
	return diffMsg(want, got), b, nil
}

// diffMsg describes how got differs from want, "" if it does not: rcode, AA
// and the sections as sets.
func diffMsg(want, got *dns.Msg) string {
	var d []string
	if want.Rcode != got.Rcode {
		d = append(d, fmt.Sprintf("rcode %s, want %s", dns.RcodeToString[got.Rcode], dns.RcodeToString[want.Rcode]))
	}
	if want.Authoritative != got.Authoritative {
		d = append(d, fmt.Sprintf("AA %v, want %v", got.Authoritative, want.Authoritative))
	}
	for i, sec := range []string{"answer", "authority", "additional"} {
		w, g := rrStrings(want, i), rrStrings(got, i)
		if !slices.Equal(w, g) {
			d = append(d, fmt.Sprintf("%s %q, want %q", sec, g, w))
		}
	}
	return strings.Join(d, "; ")
}

func rrStrings(m *dns.Msg, section int) []string {
	rrs := [][]dns.RR{m.Answer, m.Ns, m.Extra}[section]
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		out = append(out, strings.ToLower(rr.String()))
	}
	slices.Sort(out)
	return out
}

// TestMergeEqualsUnsharded: for generated zones spread over 2, 3 and 5
// shards, every answer through the merge equals the unsharded lookup's.
func TestMergeEqualsUnsharded(t *testing.T) {
	const origin = "example.org."
	for _, seed := range []int64{1, 2} {
		text, queries := dnsdiff.GenerateZone(origin, seed, 1500)
		for _, n := range []int{2, 3, 5} {
			c, whole := testRouter(t, origin, text, n)
			bad, broadcast := 0, 0
			for _, q := range queries {
				d, b, err := resolveAgainst(c, whole, q.Name, q.Type)
				if err != nil {
					t.Fatalf("%v: %v", q, err)
				}
				if b {
					broadcast++
				}
				if d != "" {
					bad++
					if bad <= 10 {
						t.Errorf("seed %d, %d shards, %v: %s", seed, n, q, d)
					}
				}
			}
			if bad > 0 {
				t.Errorf("seed %d, %d shards: %d of %d answers differ", seed, n, bad, len(queries))
			}
			t.Logf("seed %d, %d shards: %d queries, %d broadcast", seed, n, len(queries), broadcast)
		}
	}
}

// TestMergeDNAMEChains: DNAMEs that apply again to the names they
// synthesize (a target above the owner), loop (two DNAMEs to each other)
// or lead into their own subtree answer through the merge as unsharded.
func TestMergeDNAMEChains(t *testing.T) {
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
	var queries []string
	for _, n := range []string{"x.a", "x.b", "q.self", "www.up", "www.up.up", "nx.up.up", "ns1.up.up.up", "a.up", "x.a.up", "c", "q.self.up"} {
		queries = append(queries, n+"."+origin)
	}
	for _, n := range []int{2, 3} {
		c, whole := testRouter(t, origin, text, n)
		for _, name := range queries {
			for _, qt := range []uint16{dns.TypeA, dns.TypeNS, dns.TypeCNAME, dns.TypeANY} {
				r := new(dns.Msg)
				r.SetQuestion(name, qt)
				want := new(dns.Msg)
				want.SetReply(r)
				whole.Lookup(want, name, qt)
				got, _, err := c.resolveName(context.Background(), r)
				if err != nil {
					t.Fatalf("%s %s: %v", name, dns.TypeToString[qt], err)
				}
				if d := diffMsg(want, got); d != "" {
					t.Errorf("%d shards, %s %s: %s", n, name, dns.TypeToString[qt], d)
				}
			}
		}
	}
	// The chain itself: the DNAME once, a CNAME per substitution.
	c, _ := testRouter(t, origin, text, 3)
	r := new(dns.Msg)
	r.SetQuestion("www.up.up."+origin, dns.TypeA)
	got, _, err := c.resolveName(context.Background(), r)
	if err != nil || len(got.Answer) != 4 || got.Answer[0].Header().Rrtype != dns.TypeDNAME || got.Answer[3].Header().Rrtype != dns.TypeA {
		t.Errorf("www.up.up: expected the DNAME, two CNAMEs and the A, got %v %v", got, err)
	}
}

// hasSOA reports whether m carries an SOA in its answer or authority.
func hasSOA(m *dns.Msg) bool {
	for _, rr := range append(m.Answer[:len(m.Answer):len(m.Answer)], m.Ns...) {
		if rr.Header().Rrtype == dns.TypeSOA {
			return true
		}
	}
	return false
}

// TestDNAMEWithoutBroadcast: a name below a DNAME owner is answered by the
// shard the ring gives it, whichever shard holds the DNAME owner's other
// data (every shard holds every DNAME): the DNAME, its CNAME and the
// target's answer as one server gives them, and no shard asked in vain.
func TestDNAMEWithoutBroadcast(t *testing.T) {
	const origin = "example.org."
	var b strings.Builder
	b.WriteString("$ORIGIN example.org.\n@ 300 IN SOA ns1 h 1 2 3 4 5\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.53\n")
	b.WriteString("old 300 IN DNAME new\nold 300 IN TXT \"beside\"\nout 300 IN DNAME example.net.\n")
	for i := range 40 {
		fmt.Fprintf(&b, "h%d.new 300 IN A 192.0.2.%d\n", i, i+1)
	}
	c, whole := testRouter(t, origin, b.String(), 3)
	elsewhere := 0
	for i := range 40 {
		for _, name := range []string{fmt.Sprintf("h%d.old.example.org.", i), fmt.Sprintf("h%d.out.example.org.", i)} {
			if c.shardFor(name) != c.shardFor(dnsname.Lower(name[strings.IndexByte(name, '.')+1:])) {
				elsewhere++
			}
			r := new(dns.Msg)
			r.SetQuestion(name, dns.TypeA)
			want := new(dns.Msg)
			want.SetReply(r)
			whole.Lookup(want, name, dns.TypeA)
			got, broadcast, err := c.resolveName(context.Background(), r)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if d := diffMsg(want, got); d != "" {
				t.Errorf("%s: %s", name, d)
			}
			if len(got.Answer) < 2 || got.Answer[0].Header().Rrtype != dns.TypeDNAME {
				t.Errorf("%s: expected the DNAME and its CNAME, got %v", name, got.Answer)
			}
			if broadcast {
				t.Errorf("%s: every shard was asked", name)
			}
		}
	}
	if elsewhere < 20 {
		t.Fatalf("expected many names on another shard than their DNAME owner's, got %d of 80", elsewhere)
	}
	// The owner's other data, on its own shard only, answers too.
	r := new(dns.Msg)
	r.SetQuestion("old.example.org.", dns.TypeTXT)
	got, _, err := c.resolveName(context.Background(), r)
	if err != nil || len(got.Answer) != 1 || got.Answer[0].Header().Rrtype != dns.TypeTXT {
		t.Errorf("old TXT: expected the TXT beside the DNAME, got %v %v", got, err)
	}
}
