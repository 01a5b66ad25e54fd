package craftroute

import (
	"fmt"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// Owner names, relative to the origin, that fuzzed zones are made of: the
// apex, wildcards at two depths, empty non-terminals, a delegation with
// glue and names below it, and names that CNAMEs and MX records point at.
var fuzzNames = []string{
	"@", "a", "b", "a.b", "c.a.b", "d.c.a.b", "*", "*.b", "*.a.b", "x.y",
	"sub", "ns.sub", "deep.sub", "*.sub", "e", "_t.a", "m", "z.x.y",
}

// Names asked about besides fuzzNames: below wildcards, below the cut,
// below empty non-terminals, and absent ones at every depth.
var fuzzQueries = []string{"q", "q.b", "q.a.b", "q.c.a.b", "q.y", "q.sub", "q.q.a", "zz.z.x.y", "y", "c.b", "q.q.q.b"}

var fuzzTypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeCNAME, dns.TypeNS, dns.TypeDS, dns.TypeSRV}

// fuzzZone builds a zone of origin from data, three bytes a record: the
// owner (fuzzNames), the type and a variant that picks RDATA (a CNAME, MX
// or NS target among the names). It returns "" for a zone a member would
// refuse (zonerules.CheckZone: CNAME beside other data, ...).
func fuzzZone(origin string, data []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ORIGIN %s\n@ 300 IN SOA ns1 hostmaster 1 7200 3600 1209600 60\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.53\n", origin)
	abs := func(n string) string {
		if n == "@" {
			return origin
		}
		return n + "." + origin
	}
	for i := 0; i+2 < len(data) && i < 3*40; i += 3 {
		owner := fuzzNames[int(data[i])%len(fuzzNames)]
		v := int(data[i+2])
		target := fuzzNames[v%len(fuzzNames)]
		if strings.HasPrefix(target, "*") {
			target = "w" + target[1:]
		}
		switch data[i+1] % 8 {
		case 0:
			fmt.Fprintf(&b, "%s 300 IN A 192.0.2.%d\n", owner, v)
		case 1:
			fmt.Fprintf(&b, "%s 300 IN AAAA 2001:db8::%x\n", owner, v)
		case 2:
			fmt.Fprintf(&b, "%s 300 IN TXT \"t%d\"\n", owner, v%4)
		case 3:
			fmt.Fprintf(&b, "%s 300 IN MX %d %s\n", owner, v%3, abs(target))
		case 4:
			fmt.Fprintf(&b, "%s 300 IN CNAME %s\n", owner, abs(target))
		case 5:
			// A delegation: NS at a name below the apex, glue below it.
			if owner == "@" {
				owner = "sub"
			}
			fmt.Fprintf(&b, "%s 300 IN NS ns.%s\nns.%s 300 IN A 192.0.2.%d\n", owner, abs(owner), abs(owner), v)
		case 6:
			if owner != "@" {
				fmt.Fprintf(&b, "%s 300 IN DS %d 13 2 %064x\n", owner, v, v)
			}
		case 7:
			fmt.Fprintf(&b, "%s 300 IN SRV 0 %d 443 %s\n", owner, v%3, abs(target))
		}
	}
	text := b.String()
	if _, err := zoneapi.ParseZone(origin, text); err != nil {
		return ""
	}
	return text
}

// FuzzMerge checks the router's merge of the shards' answers against one
// server: a fuzzed zone is spread over 2 to 5 in-memory shards as key mode
// name places it, and every answer through resolveName (the shards'
// partition facts merged) must equal the unsharded zone's lookup, for
// every name of the zone and others around them, each type.
func FuzzMerge(f *testing.F) {
	f.Add(uint8(2), []byte{1, 0, 7, 6, 2, 1, 7, 4, 3, 10, 5, 9, 3, 3, 4})
	f.Add(uint8(3), []byte{8, 4, 3, 9, 0, 1, 10, 5, 0, 11, 0, 2, 13, 0, 3, 4, 2, 9, 5, 4, 8})
	f.Add(uint8(5), []byte{6, 0, 1, 7, 2, 2, 2, 4, 6, 17, 3, 4, 16, 4, 14, 4, 1, 0})
	f.Add(uint8(4), []byte{1, 4, 2, 2, 4, 1, 16, 4, 7, 7, 2, 3, 10, 5, 4})
	const origin = "example.org."
	f.Fuzz(func(t *testing.T, shards uint8, data []byte) {
		text := fuzzZone(origin, data)
		if text == "" {
			return
		}
		c, whole := testRouter(t, origin, text, 2+int(shards%4))
		names := append(append([]string{}, fuzzNames...), fuzzQueries...)
		for _, n := range names {
			qname := origin
			if n != "@" {
				qname = n + "." + origin
			}
			for _, qt := range fuzzTypes {
				d, _, err := resolveAgainst(c, whole, qname, qt)
				if err != nil {
					t.Fatalf("%s %s: %v\nzone:\n%s", qname, dns.TypeToString[qt], err, text)
				}
				if d != "" {
					t.Fatalf("%s %s over %d shards: %s\nzone:\n%s", qname, dns.TypeToString[qt], len(c.shards()), d, text)
				}
			}
		}
	})
}
