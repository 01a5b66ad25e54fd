package craftroute

import (
	"strconv"
	"testing"

	"github.com/miekg/dns"
)

// TestNetDifference reads the difference a member's incremental transfer
// folds its journal into, and tells a full transfer from it.
func TestNetDifference(t *testing.T) {
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	soa := func(serial int) dns.RR {
		return rr("z.example. 300 IN SOA ns.z.example. h.z.example. " + strconv.Itoa(serial) + " 7200 3600 1209600 300")
	}
	a1, a2 := rr("a.z.example. 60 IN A 192.0.2.1"), rr("b.z.example. 60 IN A 192.0.2.2")
	removed, added, ok := netDifference([]dns.RR{soa(9), soa(7), a1, soa(9), a2, soa(9)})
	if !ok || len(removed) != 2 || len(added) != 2 || removed[1] != a1 || added[1] != a2 || added[0].(*dns.SOA).Serial != 9 {
		t.Errorf("a difference: %v, %v, %v", removed, added, ok)
	}
	if removed, added, ok := netDifference([]dns.RR{soa(9)}); !ok || removed != nil || added != nil {
		t.Errorf("no change: %v, %v, %v", removed, added, ok)
	}
	for name, rrs := range map[string][]dns.RR{
		"a full transfer":        {soa(9), a1, a2, soa(9)},
		"cut short":              {soa(9), soa(7), a1, soa(9), a2},
		"two differences":        {soa(9), soa(7), a1, soa(8), soa(8), a2, soa(9)},
		"a closing SOA of other": {soa(9), soa(7), a1, soa(9), a2, soa(10)},
		"nothing":                {},
	} {
		if _, _, ok := netDifference(rrs); ok {
			t.Errorf("%s read as a difference", name)
		}
	}
}
