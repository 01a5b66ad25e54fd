package craftroute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

const splitOrigin = "example.org."

// splitZone has the apex, a delegation with DS, glue and an occluded name
// below it, a delegation to in-zone name servers outside it, a wildcard, a
// DNAME with a TXT beside it and many ordinary names.
func splitZone() string {
	var b strings.Builder
	b.WriteString(`$TTL 300
@        IN SOA ns1 hostmaster 1 7200 3600 1209600 300
@        IN NS  ns1
@        IN MX  10 mail
@        IN TXT "apex"
ns1      IN A   192.0.2.1
sub      IN NS  ns.sub
sub      IN NS  ns.other.net.
sub      IN DS  12345 13 2 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
ns.sub   IN A   192.0.2.53
del      IN NS  ns1
del      IN NS  ns.sub
deep.x.sub IN A 192.0.2.54
*.wild   IN A   192.0.2.99
alias    IN DNAME host1
alias    IN TXT "beside the DNAME"
`)
	for i := range 60 {
		fmt.Fprintf(&b, "host%d IN A 198.51.100.%d\n", i, i)
	}
	return b.String()
}

// splitRouter returns a router over n shards named s0... without members.
func splitRouter(t testing.TB, key string, n int) *Craftroute {
	t.Helper()
	c := &Craftroute{Zones: []string{splitOrigin}, cfg: config{key: key}}
	c.leases.key = testKey
	var shards []*Shard
	for i := range n {
		shards = append(shards, &Shard{Name: fmt.Sprintf("s%d", i)})
	}
	c.route(t, shards...)
	c.zones, c.neg, c.changes = newZoneSet(c.Zones), newNegCache(0), newChangeTracker()
	return c
}

func rrKey(rr dns.RR) string { return strings.ToLower(rr.String()) }

func TestSplitNameMode(t *testing.T) {
	c := splitRouter(t, keyName, 3)
	rrs, err := zoneapi.ParseZone(splitOrigin, splitZone())
	if err != nil {
		t.Fatal(err)
	}
	parts := c.split(splitOrigin, rrs)
	if len(parts) != 3 {
		t.Fatalf("expected parts for 3 shards, got %d", len(parts))
	}
	every := func(rr dns.RR) bool {
		name := dnsname.Lower(rr.Header().Name)
		switch {
		case name == splitOrigin, name == "del.example.org.", name == "sub.example.org.", rr.Header().Rrtype == dns.TypeDNAME:
			return true
		}
		return strings.HasSuffix(name, ".sub.example.org.")
	}
	union := map[string]bool{}
	spread := map[string]bool{}
	for s, part := range parts {
		for _, rr := range part {
			name := dnsname.Lower(rr.Header().Name)
			union[rrKey(rr)] = true
			if !every(rr) {
				if owner := c.shardFor(name); owner != s {
					t.Errorf("%s on shard %s, expected only on its owner %s", rr, s.Name, owner.Name)
				}
				spread[s.Name] = true
			}
		}
	}
	for _, rr := range rrs {
		if !union[rrKey(rr)] {
			t.Errorf("%s placed nowhere", rr)
		}
		if !every(rr) {
			continue
		}
		for _, s := range c.shards() {
			if !slices.ContainsFunc(parts[s], func(x dns.RR) bool { return rrKey(x) == rrKey(rr) }) {
				t.Errorf("%s missing on shard %s", rr, s.Name)
			}
		}
	}
	if len(union) != len(rrs) {
		t.Errorf("expected the union over shards to hold %d records, got %d", len(rrs), len(union))
	}
	if len(spread) != 3 {
		t.Errorf("expected ordinary names on all 3 shards, got %v", spread)
	}
}

func TestSplitZoneMode(t *testing.T) {
	c := splitRouter(t, keyZone, 3)
	rrs, err := zoneapi.ParseZone(splitOrigin, splitZone())
	if err != nil {
		t.Fatal(err)
	}
	parts := c.split(splitOrigin, rrs)
	s := c.zoneShard(splitOrigin)
	if len(parts) != 1 || len(parts[s]) != len(rrs) {
		t.Errorf("expected all %d records on shard %s, got %v", len(rrs), s.Name, parts)
	}
}

func TestUnderCut(t *testing.T) {
	cuts := map[string]bool{"sub.example.org.": true}
	tests := []struct {
		name string
		want bool
	}{
		{"example.org.", false},
		{"www.example.org.", false},
		{"sub.example.org.", true},
		{"ns.sub.example.org.", true},
		{"a.b.sub.example.org.", true},
		{"xsub.example.org.", false},
	}
	for _, tc := range tests {
		if got := underCut("example.org.", tc.name, cuts); got != tc.want {
			t.Errorf("underCut(%s): expected %v, got %v", tc.name, tc.want, got)
		}
	}
}

// zoneShards answers partition-mode queries from the zones of shards,
// changeable while in use, as craftstore members do.
type zoneShards struct {
	mu sync.Mutex
	m  map[string]*zone.Zone // shard name → its part of the zone
}

func (zs *zoneShards) set(shard string, z *zone.Zone) {
	zs.mu.Lock()
	defer zs.mu.Unlock()
	if zs.m == nil {
		zs.m = map[string]*zone.Zone{}
	}
	zs.m[shard] = z
}

func (zs *zoneShards) exchange(_ context.Context, s *Shard, req *dns.Msg) (*dns.Msg, error) {
	zs.mu.Lock()
	z := zs.m[s.Name]
	zs.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(req)
	m.SetEdns0(dns.DefaultMsgSize, false)
	q := req.Question[0]
	if z == nil || !dns.IsSubDomain(z.Origin(), dnsname.Lower(q.Name)) {
		m.Rcode = dns.RcodeRefused
		if shardproto.Requested(req) {
			shardproto.Attach(m, shardproto.Facts{Kind: shardproto.Final})
		}
		return m, nil
	}
	shardproto.Attach(m, z.Partition(m, dnsname.Lower(q.Name), q.Qtype))
	return m, nil
}

// load lays rrs of origin out on the shards of c by split.
func (zs *zoneShards) load(c *Craftroute, origin string, rrs []dns.RR) {
	for s, part := range c.split(origin, rrs) {
		z := zone.New(origin)
		z.Load(part)
		zs.set(s.Name, z)
	}
}

func TestCoveredByCut(t *testing.T) {
	c := splitRouter(t, keyName, 3)
	rrs, err := zoneapi.ParseZone(splitOrigin, splitZone())
	if err != nil {
		t.Fatal(err)
	}
	zs := &zoneShards{}
	zs.load(c, splitOrigin, rrs)
	c.ex = zs
	tests := []struct {
		name string
		want bool
	}{
		{"sub.example.org.", true},
		{"ns.sub.example.org.", true},
		{"new.deep.x.sub.example.org.", true},
		{"host1.example.org.", false},
		{"nothere.example.org.", false},
		{"a.wild.example.org.", false},
		{"x.example.org.", false}, // no name, no cut
	}
	for _, tc := range tests {
		got, err := c.coveredByCut(context.Background(), splitOrigin, tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("coveredByCut(%s): expected %v, got %v", tc.name, tc.want, got)
		}
	}
	if _, err := c.coveredByCut(context.Background(), "example.net.", "www.example.net."); !errors.Is(err, errZoneAbsent) {
		t.Errorf("expected errZoneAbsent for a zone no shard holds, got %v", err)
	}
}

func TestPlacer(t *testing.T) {
	c := splitRouter(t, keyName, 3)
	rrs, err := zoneapi.ParseZone(splitOrigin, splitZone())
	if err != nil {
		t.Fatal(err)
	}
	zs := &zoneShards{}
	zs.load(c, splitOrigin, rrs)
	c.ex = zs

	p := newPlacer(c, splitOrigin)
	p.addNS(&dns.NS{Hdr: dns.RR_Header{Name: "new.example.org.", Rrtype: dns.TypeNS, Class: dns.ClassINET}, Ns: "ns.elsewhere.example.org."})
	items := []placement{
		{"example.org.", dns.TypeTXT},
		{"host7.example.org.", dns.TypeA},
		{"host7.example.org.", dns.TypeNS},
		{"other.example.org.", dns.TypeDS},
		{"ns.new.example.org.", dns.TypeA},
		{"glue2.sub.example.org.", dns.TypeAAAA},
		{"sub.example.org.", dns.TypeANY},
		{"fresh.example.org.", dns.TypeANY},
		{"ns.elsewhere.example.org.", dns.TypeA},
		{"alias.example.org.", dns.TypeDNAME}, // a DNAME: every shard
		{"alias.example.org.", dns.TypeANY},   // every RRset of a DNAME owner
		{"alias.example.org.", dns.TypeTXT},   // an RRset beside it: its owner
		{"newalias.example.org.", dns.TypeDNAME},
		{"x.alias.example.org.", dns.TypeA}, // below a DNAME: the owner, which refuses it
	}
	if err := p.resolve(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, true, true, true, true, true, false, false, true, true, false, true, false}
	for i, it := range items {
		got := p.shards(it.name, it.rrtype)
		every := len(got) == len(c.shards())
		if every != want[i] {
			t.Errorf("%s %s: expected every shard %v, got %v", it.name, dns.TypeToString[it.rrtype], want[i], every)
		}
		if !every && (len(got) != 1 || got[0] != c.shardFor(it.name)) {
			t.Errorf("%s: expected the owner shard, got %v", it.name, got)
		}
	}
}
