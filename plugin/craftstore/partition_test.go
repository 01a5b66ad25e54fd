package craftstore

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
)

// TestAPIPartitionExport: GET /v1/zones/{zone}?partitions=...&of=N holds
// the SOA and exactly the names whose partition among N is listed (the
// part of a zone that moves to another shard); every name is in the
// export of one of two complementary halves; a bad filter is a 400.
func TestAPIPartitionExport(t *testing.T) {
	a, _ := newAPI(t, "")
	var zone strings.Builder
	zone.WriteString(apiZone)
	for i := range 60 {
		fmt.Fprintf(&zone, "h%d IN A 192.0.2.%d\n", i, i)
	}
	if code, _, raw := call(t, a, "", "PUT", "/v1/zones/example.org", zone.String()); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	const of = 7
	names := func(query string) map[string]bool {
		code, _, raw := call(t, a, "", "GET", "/v1/zones/example.org?"+query, "")
		if code != http.StatusOK {
			t.Fatalf("GET ?%s: %d %s", query, code, raw)
		}
		out := map[string]bool{}
		zp := dns.NewZoneParser(strings.NewReader(raw), "", "")
		first := true
		for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
			if first && rr.Header().Rrtype != dns.TypeSOA {
				t.Errorf("?%s: the export starts with %s, not the SOA", query, rr)
			}
			first = false
			if rr.Header().Rrtype != dns.TypeSOA {
				out[strings.ToLower(rr.Header().Name)] = true
			}
		}
		if err := zp.Err(); err != nil {
			t.Fatalf("?%s: %v", query, err)
		}
		return out
	}
	low, high := names(fmt.Sprintf("partitions=0-2&of=%d", of)), names(fmt.Sprintf("partitions=3,4,5-6&of=%d", of))
	all := names("")
	if len(low) == 0 || len(high) == 0 {
		t.Fatalf("an empty half: %d and %d names", len(low), len(high))
	}
	for n := range all {
		p := shardmap.PartitionOf(n, of)
		if low[n] == high[n] || low[n] != (p <= 2) {
			t.Errorf("%s (partition %d): in the low half %v, in the high half %v", n, p, low[n], high[n])
		}
	}
	if len(low)+len(high) != len(all) {
		t.Errorf("%d + %d names in the halves, %d in the zone", len(low), len(high), len(all))
	}
	for _, bad := range []string{"partitions=1", "of=7", "partitions=7&of=7", "partitions=3-1&of=7", "partitions=x&of=7", "partitions=1&of=0"} {
		if code, _, raw := call(t, a, "", "GET", "/v1/zones/example.org?"+bad, ""); code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s, expected 400", bad, code, raw)
		}
	}
}
