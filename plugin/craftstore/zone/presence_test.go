package zone

import (
	"slices"
	"testing"

	"github.com/miekg/dns"
)

func TestPresence(t *testing.T) {
	z := load(t, "example.org.", `$ORIGIN example.org.
@ 3600 IN SOA ns1 hostmaster 1 7200 3600 1209600 300
@ NS ns1
ns1 A 192.0.2.53
www A 192.0.2.1
www AAAA 2001:db8::1
a.ent A 192.0.2.2
*.wild TXT "w"
sub NS ns.sub
ns.sub A 192.0.2.77
`)
	for _, tc := range []struct {
		name   string
		exists bool
		types  []uint16
		glue   bool
	}{
		{"WWW.example.org.", true, []uint16{dns.TypeA, dns.TypeAAAA}, false},
		{"example.org.", true, []uint16{dns.TypeNS, dns.TypeSOA}, false},
		{"missing.example.org.", false, nil, false},
		{"ent.example.org.", true, nil, false},
		{"x.y.wild.example.org.", true, []uint16{dns.TypeTXT}, false},
		{"wild.example.org.", true, nil, false},
		{"sub.example.org.", true, []uint16{dns.TypeNS}, true},
		{"ns.sub.example.org.", true, []uint16{dns.TypeA}, true},
		{"deep.below.sub.example.org.", false, nil, true},
		{"example.com.", false, nil, false},
	} {
		exists, types, glue := z.Presence(tc.name)
		if exists != tc.exists || !slices.Equal(types, tc.types) || glue != tc.glue {
			t.Errorf("%s: exists %v types %v glue %v, expected %v %v %v", tc.name, exists, types, glue, tc.exists, tc.types, tc.glue)
		}
		if z.Glue(tc.name) != tc.glue {
			t.Errorf("%s: Glue %v", tc.name, !tc.glue)
		}
	}
}
