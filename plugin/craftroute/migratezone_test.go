package craftroute

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/shardmap"

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

// TestCheckVersions: a migration starts only while every member of every
// shard says this build's state machine version; a running one goes on
// past members that do not answer, not past one of another version.
func TestCheckVersions(t *testing.T) {
	member := func(version int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/cluster" {
				http.NotFound(w, r)
				return
			}
			if version < 0 {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			if version == 0 {
				fmt.Fprint(w, `{"id":1,"leader":1}`) // a build before the version
				return
			}
			fmt.Fprintf(w, `{"id":1,"leader":1,"fsm_version":%d}`, version)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	c := &Craftroute{}
	c.txc = newShardClient(c)
	shard := func(name string, versions ...int) shardmap.Shard {
		s := shardmap.Shard{Name: name}
		for i, v := range versions {
			s.Members = append(s.Members, "127.0.0.1:"+strconv.Itoa(1000+i))
			s.API = append(s.API, member(v))
		}
		return s
	}
	cur := shardmap.FSMVersion
	ctx := context.Background()
	m := &shardmap.Map{Shards: []shardmap.Shard{shard("a", cur, cur), shard("b", cur, cur)}}
	if err := c.checkVersions(ctx, m, nil, true); err != nil {
		t.Errorf("every member at this version: %v", err)
	}
	c2 := shard("c", cur, 0)
	if err := c.checkVersions(ctx, m, &c2, true); err == nil || !strings.Contains(err.Error(), "version 0") {
		t.Errorf("a new shard's member of an older build: %v", err)
	}
	m.Shards = append(m.Shards, shard("d", cur, -1))
	if err := c.checkVersions(ctx, m, nil, true); err == nil {
		t.Error("a member that cannot say its version passed the check of a start")
	}
	if err := c.checkVersions(ctx, m, nil, false); err != nil {
		t.Errorf("a running migration and a member down: %v", err)
	}
	m.Shards = append(m.Shards, shard("e", cur+1))
	if err := c.checkVersions(ctx, m, nil, false); err == nil {
		t.Error("a member of a newer version passed")
	}
}
