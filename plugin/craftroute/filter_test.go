package craftroute

import (
	"fmt"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/namefilter"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// filteredRouter is testRouter with every shard's existence filter of
// origin in use, built from the names each shard holds, as a member builds
// it, and change leases held.
func filteredRouter(t *testing.T, origin, text string, n int) (*Craftroute, *zone.Zone, map[*Shard][]dns.RR) {
	t.Helper()
	c, whole := testRouter(t, origin, text, n)
	parts := c.split(origin, dnsdiff.ParseZone(t, origin, text))
	c.filters = newNameFilters(c, 64<<20)
	c.leases.port = 53
	c.leases.validUntil.Store(time.Now().Add(time.Hour).UnixNano())
	set := &filterSet{rt: c.routes(), start: c.changes.begin(), noticed: namefilter.New(noticedNames, 1), at: time.Now()}
	for _, s := range c.routes().shards {
		f := namefilter.New(len(parts[s]), uint64(len(set.parts)+2))
		for _, rr := range parts[s] {
			f.AddKey(dnsname.CanonicalKey(rr.Header().Name))
		}
		set.parts = append(set.parts, f)
	}
	zf := &zoneFilters{}
	zf.set.Store(set)
	c.filters.zones.Store(origin, zf)
	c.filters.nzones.Add(1)
	return c, whole, parts
}

// ask resolves name/qtype through c and compares the answer with whole's;
// it returns what differs ("" if nothing) and whether every shard was
// asked.
func ask(t *testing.T, c *Craftroute, whole *zone.Zone, name string, qtype uint16) (string, bool) {
	t.Helper()
	d, b, err := resolveAgainst(c, whole, name, qtype)
	if err != nil {
		t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return d, b
}

// TestFiltersEqualUnsharded: with the shards' filters in use, every answer
// for the generated zones' queries (empty non-terminals, wildcards, cuts,
// CNAME and DNAME chains) and for made-up names equals the unsharded
// lookup's, and nearly no made-up name is asked of every shard.
func TestFiltersEqualUnsharded(t *testing.T) {
	const origin = "example.org."
	for _, seed := range []int64{1, 2} {
		text, queries := dnsdiff.GenerateZone(origin, seed, 1500)
		for _, n := range []int{2, 3, 5} {
			c, whole, _ := filteredRouter(t, origin, text, n)
			for i := range 300 {
				queries = append(queries, dnsdiff.Query{Name: fmt.Sprintf("made-up-%d.%s", i, origin), Type: dns.TypeA})
			}
			bad, madeUp := 0, 0
			for _, q := range queries {
				d, b := ask(t, c, whole, q.Name, q.Type)
				if d != "" {
					bad++
					if bad <= 10 {
						t.Errorf("seed %d, %d shards, %v: %s", seed, n, q, d)
					}
				}
				if b && len(q.Name) > 8 && q.Name[:8] == "made-up-" {
					madeUp++
				}
			}
			if madeUp > 15 {
				t.Errorf("seed %d, %d shards: %d of 300 made-up names asked of every shard, expected a few (false positives)", seed, n, madeUp)
			}
		}
	}
}

// TestFiltersFollowNotices: a name written on one shard after its filter
// was built makes its parent an empty non-terminal that the owner of the
// parent does not hold: without the notice the router would answer
// NXDOMAIN from the filters, with it the router asks every shard. The
// filters are not used while the leases lapsed, after a lapse until a new
// set is fetched, nor under another routing (and a new set is then asked
// for).
func TestFiltersFollowNotices(t *testing.T) {
	const origin = "example.org."
	text, _ := dnsdiff.GenerateZone(origin, 3, 500)
	c, whole, parts := filteredRouter(t, origin, text, 3)
	rt := c.routes()
	// A parent and a child that live on different shards.
	var parent, child string
	for i := 0; ; i++ {
		parent = fmt.Sprintf("ent%d.%s", i, origin)
		child = "leaf." + parent
		if c.ownerIn(rt, parent) != c.ownerIn(rt, child) {
			break
		}
	}
	rr, err := dns.NewRR(child + " 300 IN A 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := ask(t, c, whole, parent, dns.TypeA); d != "" {
		t.Fatalf("%s before the write: %s", parent, d)
	}
	// The write lands on the child's shard and in the unsharded zone.
	s := c.ownerIn(rt, child)
	parts[s] = append(parts[s], rr)
	z := zone.New(origin)
	z.Load(parts[s])
	c.ex.(memShards)[s.Name] = z
	whole.Set([]zone.NameRecords{{Name: dnsname.Lower(child), RRs: []dns.RR{rr}}})
	if d, b := ask(t, c, whole, parent, dns.TypeA); d == "" || b {
		t.Fatalf("%s after an unnotified write: expected the filters' stale NXDOMAIN (the test's premise), got the right answer (broadcast %v)", parent, b)
	}
	c.filters.noticed(origin, []string{dnsname.Lower(child)})
	if d, b := ask(t, c, whole, parent, dns.TypeA); d != "" || !b {
		t.Errorf("%s after the notice: expected the unsharded answer from every shard, got %q (broadcast %v)", parent, d, b)
	}

	madeUp := "made-up-name." + origin
	if _, b := ask(t, c, whole, madeUp, dns.TypeA); b {
		t.Fatalf("%s: asked of every shard with the filters in use", madeUp)
	}
	// A lapse of the leases: not used.
	c.leases.validUntil.Store(0)
	if _, b := ask(t, c, whole, madeUp, dns.TypeA); !b {
		t.Error("the filters were used while the leases lapsed")
	}
	c.leases.validUntil.Store(time.Now().Add(time.Hour).UnixNano())
	// Held again after a lapse (changeTracker.void): the set is void.
	c.changes.void()
	if _, b := ask(t, c, whole, madeUp, dns.TypeA); !b {
		t.Error("a set fetched before a lapse was used after it")
	}
	select {
	case got := <-c.filters.kick:
		if got != origin {
			t.Errorf("the fetch of %s was asked for, expected %s", got, origin)
		}
	default:
		t.Error("no new set was asked for after the lapse")
	}
	// Another routing: not used either.
	c2, whole2, _ := filteredRouter(t, origin, text, 3)
	c2.route(t, c2.routes().shards...)
	if _, b := ask(t, c2, whole2, madeUp, dns.TypeA); !b {
		t.Error("a set fetched by another routing was used")
	}
	// A zone replaced (a notice without names): the set is dropped.
	c3, whole3, _ := filteredRouter(t, origin, text, 3)
	c3.filters.noticed(origin, nil)
	if _, b := ask(t, c3, whole3, madeUp, dns.TypeA); !b {
		t.Error("a set was used after its zone was replaced")
	}
}
