package craftroute

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// TestMergeCases builds, for each case the merge must get right, a zone
// whose names are placed so that the case really crosses shards, and checks
// the answer through the router against the unsharded lookup, whether it
// took a broadcast, and the rcode.
func TestMergeCases(t *testing.T) {
	const origin = "example.org."
	// A two-shard ring to choose names with: placement depends only on it.
	probe, _ := testRouter(t, origin, "@ 3600 IN SOA ns1 h 1 2 3 4 300\n@ IN NS ns1\nns1 IN A 192.0.2.1\n", 2)
	owner := func(name string) string { return probe.shardFor(name + "." + origin).Name }
	// pick returns the first name made by f(i) for which ok holds.
	pick := func(f func(i int) string, ok func(string) bool) string {
		for i := range 10000 {
			if n := f(i); ok(n) {
				return n
			}
		}
		t.Fatal("no name found")
		return ""
	}

	ent := pick(func(i int) string { return fmt.Sprintf("e%d", i) },
		func(n string) bool { return owner(n) != owner("a."+n) })
	wq := pick(func(i int) string { return fmt.Sprintf("q%d.w", i) },
		func(n string) bool { return owner(n) != owner("*.w") })
	// c.<b>.w has the owner of *.w (which alone would synthesize wrongly);
	// a.<b>.w makes <b>.w exist on the other shard: the closest encloser
	// is <b>.w, which has no wildcard, so NXDOMAIN.
	var deep, deepChild string
	pick(func(i int) string { return fmt.Sprintf("b%d", i) }, func(b string) bool {
		deep, deepChild = "c."+b+".w", "a."+b+".w"
		return owner(deep) == owner("*.w") && owner(deepChild) != owner("*.w")
	})
	alias := pick(func(i int) string { return fmt.Sprintf("alias%d", i) },
		func(n string) bool { return owner(n) != owner("target") })
	walias := pick(func(i int) string { return fmt.Sprintf("walias%d", i) },
		func(n string) bool { return owner(n) != owner("*.w") && owner(n) != owner("x.w") })
	// A delegation whose name server is a name of the zone outside the cut,
	// on another shard than the query name's.
	sib := pick(func(i int) string { return fmt.Sprintf("ns%d.sib", i) },
		func(n string) bool { return owner(n) != owner("x.sub2") })
	missing := pick(func(i int) string { return fmt.Sprintf("nx%d", i) }, func(string) bool { return true })

	text := fmt.Sprintf(`$ORIGIN %s
@ 3600 IN SOA ns1 h 1 7200 3600 1209600 300
@ 3600 IN NS ns1
ns1 IN A 192.0.2.1
a.%s IN A 192.0.2.2
*.w IN A 192.0.2.3
*.w IN TXT "wild"
%s IN A 192.0.2.4
%s IN CNAME target
target IN A 192.0.2.5
%s IN CNAME x.w
sub IN NS ns.sub
ns.sub IN A 192.0.2.6
loop1 IN CNAME loop2
loop2 IN CNAME loop1
sub2 IN NS %s
sub2 IN NS ns.sub
%s IN A 192.0.2.7
%s IN AAAA 2001:db8::7
`, origin, ent, deepChild, alias, walias, sib, sib, sib)
	c, whole := testRouter(t, origin, text, 2)

	for _, tc := range []struct {
		name      string
		qname     string
		qtype     uint16
		rcode     int
		answers   int
		broadcast bool
	}{
		{"empty non-terminal over another shard's name", ent, dns.TypeA, dns.RcodeSuccess, 0, true},
		{"wildcard on another shard", wq, dns.TypeA, dns.RcodeSuccess, 1, true},
		{"wildcard NODATA", wq, dns.TypeMX, dns.RcodeSuccess, 0, true},
		{"deeper closest encloser on another shard", deep, dns.TypeA, dns.RcodeNameError, 0, true},
		{"CNAME target on another shard", alias, dns.TypeA, dns.RcodeSuccess, 2, false},
		{"CNAME to a wildcard on another shard", walias, dns.TypeTXT, dns.RcodeSuccess, 2, true},
		{"referral below a delegation", "x.sub", dns.TypeA, dns.RcodeSuccess, 0, false},
		{"referral with glue from another shard", "x.sub2", dns.TypeA, dns.RcodeSuccess, 0, false},
		{"NXDOMAIN", missing, dns.TypeA, dns.RcodeNameError, 0, true},
		{"CNAME loop across shards", "loop1", dns.TypeA, dns.RcodeSuccess, 2, false},
		{"existing name", "a." + ent, dns.TypeA, dns.RcodeSuccess, 1, false},
		{"NODATA at an existing name", "target", dns.TypeMX, dns.RcodeSuccess, 0, false},
		{"apex", "@", dns.TypeSOA, dns.RcodeSuccess, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qname := origin
			if tc.qname != "@" {
				qname = tc.qname + "." + origin
			}
			r := new(dns.Msg)
			r.SetQuestion(strings.ToUpper(qname[:1])+qname[1:], tc.qtype)
			r.SetEdns0(1232, false)
			want := new(dns.Msg)
			want.SetReply(r)
			whole.Lookup(want, dnsname.Lower(qname), tc.qtype)
			got, broadcast, err := c.resolveName(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffMsg(want, got); d != "" {
				t.Fatalf("differs from one unsharded server: %s", d)
			}
			if got.Rcode != tc.rcode || len(got.Answer) != tc.answers {
				t.Fatalf("rcode %s with %d answers, want %s with %d: %v", dns.RcodeToString[got.Rcode],
					len(got.Answer), dns.RcodeToString[tc.rcode], tc.answers, got)
			}
			if broadcast != tc.broadcast {
				t.Fatalf("broadcast %v, want %v", broadcast, tc.broadcast)
			}
		})
	}
}

// TestGlueFromNewerMember: a referral whose name server is a name of the
// zone outside the cut, which the resolution's map places on the shard
// that answered, is trusted to carry its address, unless the member's map
// was newer than the resolution's (ahead): the name may have left that
// shard since (a migration's batch), so it is asked for, and the address
// added.
func TestGlueFromNewerMember(t *testing.T) {
	const origin = "example.org."
	probe, _ := testRouter(t, origin, "@ 3600 IN SOA ns1 h 1 2 3 4 300\n@ IN NS ns1\nns1 IN A 192.0.2.1\n", 2)
	owner := func(name string) string { return probe.shardFor(name + "." + origin).Name }
	var sib string
	for i := range 10000 {
		if n := fmt.Sprintf("ns%d.sib", i); owner(n) == owner("x.sub") {
			sib = n
			break
		}
	}
	if sib == "" {
		t.Fatal("no name found")
	}
	c, _ := testRouter(t, origin, fmt.Sprintf(`$ORIGIN %s
@ 3600 IN SOA ns1 h 1 7200 3600 1209600 300
@ 3600 IN NS ns1
ns1 IN A 192.0.2.1
sub IN NS %s
%s IN A 192.0.2.7
`, origin, sib, sib), 2)
	answered := c.shardFor("x.sub." + origin)
	for _, ahead := range []bool{false, true} {
		r := new(dns.Msg)
		r.SetQuestion("x.sub."+origin, dns.TypeA)
		// The referral as a member without the name server's address
		// sends it.
		resp := new(dns.Msg)
		resp.SetReply(r)
		ns, err := dns.NewRR("sub." + origin + " 3600 IN NS " + sib + "." + origin)
		if err != nil {
			t.Fatal(err)
		}
		resp.Ns = []dns.RR{ns}
		if ahead {
			shardproto.AttachEpoch(resp, c.routes().epoch()+1, false)
		}
		if err := c.addGlue(context.Background(), r, answered, resp, origin); err != nil {
			t.Fatal(err)
		}
		var extra []dns.RR // the additional section but the OPT record
		for _, rr := range resp.Extra {
			if rr.Header().Rrtype != dns.TypeOPT {
				extra = append(extra, rr)
			}
		}
		switch {
		case !ahead && len(extra) != 0:
			t.Errorf("a member at the resolution's map: its referral was completed: %v", extra)
		case ahead && (len(extra) != 1 || extra[0].Header().Name != sib+"."+origin):
			t.Errorf("a member with a newer map: expected %s's address asked for and added, got %v", sib, extra)
		}
	}
}

// TestWildcardOnAnotherShard: the fan-out's merge takes a wildcard's
// synthesis from the shard that holds its data even when the resolution's
// map places "*.<encloser>" elsewhere (a member with a newer map: a
// migration's batch moved it) and a third shard holds "*.<encloser>" only
// as an empty non-terminal above a name below the wildcard, which alone
// would synthesize NODATA.
func TestWildcardOnAnotherShard(t *testing.T) {
	const origin = "example.org."
	probe, _ := testRouter(t, origin, "@ 3600 IN SOA ns1 h 1 2 3 4 300\n@ IN NS ns1\nns1 IN A 192.0.2.1\n", 3)
	rt := probe.routes()
	owner := func(name string) int { return indexOf(rt.shards, probe.shardFor(name+"."+origin)) }
	x := owner("*.w") // where the map places the wildcard
	var below string  // a name below the wildcard on the first other shard
	for i := range 10000 {
		n := fmt.Sprintf("b%d.*.w", i)
		if o := owner(n); o != x && (o == 0 || (o == 1 && x == 0)) {
			below = n
			break
		}
	}
	q := ""
	for i := range 10000 {
		if n := fmt.Sprintf("q%d.w", i); owner(n) != x && owner(n) != owner(below) {
			q = n
			break
		}
	}
	if below == "" || q == "" {
		t.Fatal("no names found")
	}
	c, whole := testRouter(t, origin, fmt.Sprintf(`$ORIGIN %s
@ 3600 IN SOA ns1 h 1 7200 3600 1209600 300
@ 3600 IN NS ns1
ns1 IN A 192.0.2.1
*.w IN A 192.0.2.3
%s IN TXT "below the wildcard"
`, origin, below), 3)
	// The wildcard's data moves from x to the third shard, y.
	y := 3 - x - owner(below)
	ms := c.ex.(memShards)
	wild := dnsname.Lower("*.w." + origin)
	rrs := ms[c.routes().shards[x].Name].RRs(wild, dns.TypeA)
	if len(rrs) != 1 {
		t.Fatalf("the wildcard is not on shard %d: %v", x, rrs)
	}
	ms[c.routes().shards[x].Name].Set([]zone.NameRecords{{Name: wild}})
	ms[c.routes().shards[y].Name].Set([]zone.NameRecords{{Name: wild, RRs: rrs}})

	r := new(dns.Msg)
	r.SetQuestion(q+"."+origin, dns.TypeA)
	r.SetEdns0(1232, false)
	want := new(dns.Msg)
	want.SetReply(r)
	whole.Lookup(want, dnsname.Lower(q+"."+origin), dns.TypeA)
	got, _, err := c.resolveName(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffMsg(want, got); d != "" || len(got.Answer) != 1 {
		t.Fatalf("differs from one unsharded server: %s (%v)", d, got)
	}
}
