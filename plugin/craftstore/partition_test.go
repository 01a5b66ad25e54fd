package craftstore

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/txn"

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

// TestAPIPartitionsMove: GET /v1/partitions?shared=1 holds, for every
// zone behind its $ORIGIN line, the records every shard holds (the apex,
// a cut with what is below it, a DNAME), and ?partitions=...&of=N the
// others of those partitions (the DNAME owner's other records included);
// the two never share a record, and all partitions' export with the
// shared one is the zones. Without a filter, or with both, it is a 400.
func TestAPIPartitionsMove(t *testing.T) {
	a, _ := newAPI(t, "")
	zones := map[string]string{
		"example.org": apiZone + "sub IN NS ns.sub\nns.sub IN A 192.0.2.7\nx.sub IN TXT occluded\nd IN DNAME example.net.\nd IN TXT beside\nsubb IN A 192.0.2.8\n",
		"example.net": strings.ReplaceAll(apiZone, "example.org.", "example.net.") + "h1 IN A 192.0.2.1\n",
	}
	for z, text := range zones {
		if code, _, raw := call(t, a, "", "PUT", "/v1/zones/"+z, text); code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", z, code, raw)
		}
	}
	read := func(query string) map[string]bool {
		t.Helper()
		code, _, raw := call(t, a, "", "GET", "/v1/partitions?"+query, "")
		if code != http.StatusOK || !strings.HasSuffix(raw, "; end\n") {
			t.Fatalf("GET ?%s: %d %q", query, code, raw)
		}
		out := map[string]bool{}
		origin := ""
		for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
			if o, ok := strings.CutPrefix(line, "$ORIGIN "); ok {
				origin = o
				continue
			}
			if strings.HasPrefix(line, ";") {
				continue
			}
			rr, err := dns.NewRR(line)
			if err != nil || !dns.IsSubDomain(origin, rr.Header().Name) {
				t.Fatalf("?%s: %q in zone %q: %v", query, line, origin, err)
			}
			out[rr.String()] = true
		}
		return out
	}
	shared := read("shared=1")
	owned := read("partitions=0-6&of=7")
	for _, want := range []string{"example.org.\t300\tIN\tSOA", "sub.example.org.\t300\tIN\tNS", "ns.sub.example.org.", "x.sub.example.org.", "d.example.org.\t300\tIN\tDNAME", "example.net.\t300\tIN\tNS"} {
		if !hasPrefix(shared, want) || hasPrefix(owned, want) {
			t.Errorf("%q: in the shared export %v, in the partitions' %v", want, hasPrefix(shared, want), hasPrefix(owned, want))
		}
	}
	for _, want := range []string{"d.example.org.\t300\tIN\tTXT", "subb.example.org.", "www.example.org.", "h1.example.net."} {
		if hasPrefix(shared, want) || !hasPrefix(owned, want) {
			t.Errorf("%q: in the shared export %v, in the partitions' %v", want, hasPrefix(shared, want), hasPrefix(owned, want))
		}
	}
	www := shardmap.PartitionOf("www.example.org.", 7)
	if one := read(fmt.Sprintf("partitions=%d&of=7", www)); !hasPrefix(one, "www.example.org.") || len(one) >= len(owned) {
		t.Errorf("partition %d alone: %v", www, one)
	}
	// With a map of key mode "name" the member reads its partition index:
	// the same records.
	self := txn.Coordinator{Shard: "a", APIs: []string{"http://" + a.addr()}}
	m := &shardmap.Map{Epoch: 1, Key: shardmap.KeyName, Partitions: shardmap.MinPartitions, Load: shardmap.DefaultLoad,
		Shards: []shardmap.Shard{{Name: "a", Members: []string{"127.0.0.1:1053"}, API: []string{"http://" + a.addr()}}}}
	body, _ := json.Marshal(txn.Prepare{Coordinator: self, Participants: []string{"a"}, Map: m, Shard: "a"})
	id := txn.NewID()
	for _, step := range [][2]string{{txn.PreparePath(id), string(body)}, {txn.DecidePath(id), `{"outcome":"commit"}`}, {txn.FinishPath(id, txn.Commit), `{}`}} {
		if code, _, raw := call(t, a, "", "POST", step[0], step[1]); code != http.StatusOK || strings.Contains(raw, `"yes":false`) {
			t.Fatalf("%s: %d %s", step[0], code, raw)
		}
	}
	scanned := read(fmt.Sprintf("partitions=0-%d&of=%d", shardmap.MinPartitions-1, shardmap.MinPartitions))
	if !maps.Equal(scanned, owned) {
		t.Errorf("the index gives %d records, the scan %d", len(scanned), len(owned))
	}
	www = shardmap.PartitionOf("www.example.org.", shardmap.MinPartitions)
	if one := read(fmt.Sprintf("partitions=%d&of=%d", www, shardmap.MinPartitions)); !hasPrefix(one, "www.example.org.") || len(one) >= len(owned) {
		t.Errorf("partition %d alone, from the index: %v", www, one)
	}
	for _, bad := range []string{"", "shared=1&partitions=1&of=7", "partitions=1"} {
		if code, _, raw := call(t, a, "", "GET", "/v1/partitions?"+bad, ""); code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s, expected 400", bad, code, raw)
		}
	}
}

func hasPrefix(set map[string]bool, prefix string) bool {
	for s := range set {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
