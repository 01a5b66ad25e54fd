package zoneapi

import (
	"bytes"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
)

// FuzzParseZone: any zone file text a PUT carries is refused with an error
// or gives at most the limit of records, all inside the zone, with one SOA
// at the apex, that zonerules.CheckZone passes again; never a panic.
func FuzzParseZone(f *testing.F) {
	f.Add("$ORIGIN example.org.\n@ 300 IN SOA ns1 h 1 7200 3600 1209600 300\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.1\n")
	f.Add("@ SOA ns1 h 1 2 3 4 5\n@ NS ns1\n$GENERATE 1-100 h$ A 192.0.2.$\n*.w TXT \"x\"\nc CNAME w\n")
	f.Add("$INCLUDE /etc/passwd\n")
	f.Add("@ SOA ( ns1 h 1 2 3 4 5\n")
	f.Fuzz(func(t *testing.T, text string) {
		const max = 1000
		rrs, err := ParseZoneMax("example.org.", text, max)
		if err != nil {
			return
		}
		if len(rrs) > max {
			t.Fatalf("%d records over the limit of %d", len(rrs), max)
		}
		if err := zonerules.CheckZone("example.org.", rrs); err != nil {
			t.Fatalf("a parsed zone fails its checks: %v", err)
		}
		for _, rr := range rrs {
			if !dns.IsSubDomain("example.org.", strings.ToLower(rr.Header().Name)) {
				t.Fatalf("%v is outside the zone", rr)
			}
			if !zonerules.Storable(rr) {
				t.Fatalf("%v cannot be stored", rr)
			}
		}
	})
}

// FuzzRecordChange: any body of POST /v1/zones/{zone}/records is refused
// with an error or parses into records and deletions the zone may take:
// inside the zone, no DNSSEC types; never a panic.
func FuzzRecordChange(f *testing.F) {
	f.Add([]byte(`{"add":["www 300 IN A 192.0.2.1"],"delete":["old 300 IN A 192.0.2.2",{"name":"x","type":"TXT"},{"name":"y"}]}`))
	f.Add([]byte(`{"add":["www 300 IN RRSIG A 13 3 300 20300101000000 20200101000000 1 example.org. AAAA"]}`))
	f.Add([]byte(`{"delete":[{"name":"..","type":"A"}]}`))
	f.Add([]byte(`{"add":[""],"extra":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := ReadChange(bytes.NewReader(body))
		if err != nil {
			return
		}
		for _, text := range c.Add {
			rr, err := ParseRecord("example.org.", text)
			if err != nil {
				continue
			}
			if zonerules.SignedType(rr.Header().Rrtype) || zonerules.CheckRecord("example.org.", rr) != nil || !zonerules.Storable(rr) {
				t.Fatalf("%q parsed into %v, which a change may not add", text, rr)
			}
		}
		for _, raw := range c.Delete {
			d, err := ParseDeletion("example.org.", raw)
			if err != nil {
				continue
			}
			if d.RR == nil && !dns.IsSubDomain("example.org.", d.Name) {
				t.Fatalf("%s deletes %q, outside the zone", raw, d.Name)
			}
		}
	})
}
