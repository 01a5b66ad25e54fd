package replica

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// TestSerialBase: the serial base is the serial a zone was last given
// explicitly; bumps keep it. Every member keeps it, across a restart and
// across a snapshot sent to a member that fell behind.
func TestSerialBase(t *testing.T) {
	c := newTestCluster(t, 3, 8)
	r := c.leader()
	const origin = "example.org."
	want := func(what string, serial, base uint32) {
		t.Helper()
		for id, m := range c.members {
			eventually(t, fmt.Sprintf("%s on member %d", what, id), func() bool {
				z := m.Zone(origin)
				if z == nil {
					return false
				}
				s, b, ok := z.Serial()
				return ok && s == serial && b == base
			})
		}
	}
	if _, err := r.PutZone(ctx(t), origin, parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	want("import", 1, 1)
	for i := range 2 {
		if _, err := r.Change(ctx(t), origin, []dns.RR{mustRR(t, fmt.Sprintf("n%d.example.org. 60 IN A 192.0.2.1", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	want("two changes", 3, 1)
	soa := mustRR(t, "example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. 100 7200 3600 1209600 300")
	if rcode, serial, err := r.Update(ctx(t), origin, nil, []dns.RR{soa}); err != nil || rcode != dns.RcodeSuccess || serial != 100 {
		t.Fatalf("explicit SOA: %s %d %v", dns.RcodeToString[rcode], serial, err)
	}
	want("an explicit serial", 100, 100)
	if _, err := r.Change(ctx(t), origin, []dns.RR{soa}, nil); err != nil { // not newer: a bump
		t.Fatal(err)
	}
	want("an SOA that is not newer", 101, 100)

	// A member that misses enough entries is sent a snapshot.
	var behind uint64
	for id, m := range c.members {
		if m != r {
			behind = id
		}
	}
	c.stop(behind)
	for i := range 20 {
		if _, err := r.Change(ctx(t), origin, []dns.RR{mustRR(t, fmt.Sprintf("m%d.example.org. 60 IN A 192.0.2.1", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.start(behind, false)
	want("a snapshot", 121, 100)

	// Import again: the import's serial (bumped, being older) is the base.
	if _, err := r.PutZone(ctx(t), origin, parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	want("a new import", 122, 122)
	var ids []uint64
	for id := range c.members {
		ids = append(ids, id)
	}
	for _, id := range ids {
		c.stop(id)
		c.start(id, false)
	}
	r = c.leader()
	want("a restart", 122, 122)
	if err := r.DeleteZone(ctx(t), origin); err != nil {
		t.Fatal(err)
	}
	if _, err := r.PutZone(ctx(t), origin, parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	want("a deleted and created zone", 1, 1)
}
