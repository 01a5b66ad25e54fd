package integration

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
)

// TestShardAddRemoveZones (issue 52, key mode "zone"): whole zones move.
// Two shards hold 16 zones placed by their origins; POST /v1/shards adds
// a third under writes through both routers to four of them and reads
// compared with one member holding every zone; when it ends the new shard
// holds whole zones (those its partitions place on it, every record of
// each) and the old owners no longer hold them, no answer differed, no
// write failed, every zone's AXFR through a router equals the reference's.
// DELETE /v1/shards/c moves them back, and leaves c without zones. The
// leader of the shard that takes zones over is killed (kill -9) and
// started again during each migration, which goes on.
func TestShardAddRemoveZones(t *testing.T) {
	wd := harness.Workdir(t)
	var zones []string
	for i := range 16 {
		zones = append(zones, fmt.Sprintf("z%d.zones.example.", i))
	}
	spec := routerSpec{zones: zones, key: "zone", mapSeed: true, transfer: true}
	s := startSharded(t, wd, 2, 3, zones, spec, spec)
	singleAddr, single := startSingle(t, wd, zones)
	a1, a2 := s.routers[0].client(), s.routers[1].client()
	harness.Eventually(t, "router 1 at epoch 1", 20*time.Second, func() bool { _, _, e := migrationOf(t, a1); return e >= 1 })
	var sample []dnsdiff.Query
	for i, z := range zones {
		text, queries := dnsdiff.GenerateZone(z, int64(520+i), 120)
		putZone(t, single, z, text)
		putZone(t, a1, z, text)
		for j, q := range sampleQueries(queries, 40) {
			if j%3 == 0 {
				sample = append(sample, q)
			}
		}
	}
	routerAddrs := []string{s.routers[0].addr(), s.routers[1].addr()}
	compare := func(what string) {
		t.Helper()
		began := time.Now()
		defer func() { t.Logf("%s: compared in %v", what, time.Since(began).Round(time.Millisecond)) }()
		for a, r := range compareWithRef(singleAddr, routerAddrs, sample, true) {
			if r.differ > 0 {
				t.Errorf("%s, %s: %d answers differ: %s", what, a, r.differ, r)
			}
		}
		for _, z := range zones {
			want := exportOf(t, single, z)
			got, err := axfrIn(routerAddrs[0], z)
			// By text: miekg/dns's IsDuplicate tells a DS from its own
			// copy off the wire.
			if err != nil || len(noSOA(got)) != len(noSOA(want)) || len(minus(noSOA(got), noSOA(want))) > 0 || len(minus(noSOA(want), noSOA(got))) > 0 {
				t.Errorf("%s: AXFR of %s through router 1: %d records but the SOA (%v), the reference's %d; only through the router: %v; only in the reference: %v",
					what, z, len(noSOA(got)), err, len(noSOA(want)), minus(noSOA(got), noSOA(want)), minus(noSOA(want), noSOA(got)))
			}
		}
	}
	compare("before any migration")
	c := s.startShard(t, "c", 3, zones)

	// holders lists the shards whose first member holds zone z.
	holders := func(z string) []string {
		var out []string
		for _, sh := range []string{"a", "b", "c"} {
			if n, err := zoneRecords(s.members[sh][0].client(), z); err == nil && n > 0 {
				out = append(out, sh)
			}
		}
		return out
	}
	// migrate runs a migration under load; kill, when set, is the shard
	// whose leader is killed (kill -9) once 16 partitions moved, and
	// started again.
	migrate := func(what, method, path string, body any, from int, kill string) []string {
		t.Helper()
		var loads []*migrationLoad
		for i, z := range zones[:4] {
			var during []dnsdiff.Query // a round in well under a second
			for j := i; j < len(sample); j += 150 {
				during = append(during, sample[j])
			}
			loads = append(loads, startMigrationLoad(t, s.routers, single, singleAddr, z, during, from+1000*i, kill != ""))
		}
		time.Sleep(300 * time.Millisecond)
		var out map[string]any
		if code, err := a1.Do(method, path, body, &out); err != nil || code != http.StatusAccepted {
			t.Fatalf("%s %s: %d %v %v", method, path, code, err, out)
		}
		if kill != "" {
			waitMoved(t, a1, 16)
			l := leaderOf(t, s.members[kill])
			l.p.Kill()
			t.Logf("%s: %s, the leader of shard %s, killed", what, l.name, kill)
			time.Sleep(2 * time.Second)
			l.p.Restart()
		}
		waitMigration(t, a1, 90*time.Second)
		time.Sleep(300 * time.Millisecond)
		var written []string
		for i, l := range loads {
			written = append(written, l.end(t, fmt.Sprintf("%s, writes to %s", what, zones[i]))...)
		}
		return written
	}

	written := migrate("adding c", "POST", "/v1/shards", shardBody("c", c...), 0, "c")
	_, parts, epoch := migrationOf(t, a1)
	t.Logf("after adding c: epoch %d, partitions %v", epoch, parts)
	if third := float64(shardmap.DefaultPartitions) / 3; float64(parts["c"]) < 0.8*third || float64(parts["c"]) > 1.2*third {
		t.Errorf("shard c owns %d partitions, expected about %.0f", parts["c"], third)
	}
	onC := 0
	for _, z := range zones {
		h := holders(z)
		if len(h) != 1 {
			t.Errorf("after adding c, zone %s is held by shards %v, expected one", z, h)
		}
		if slices.Contains(h, "c") {
			onC++
		}
	}
	if onC == 0 {
		t.Error("after adding c, it holds no zone")
	}
	t.Logf("after adding c: %d of %d zones on c", onC, len(zones))
	compare("after adding c")
	var qs []dnsdiff.Query
	for _, n := range written {
		qs = append(qs, dnsdiff.Query{Name: n, Type: dns.TypeA})
	}
	for a, r := range compareWithRef(singleAddr, routerAddrs, qs, true) {
		if r.differ > 0 {
			t.Errorf("after adding c, %s: %d of the %d names written differ: %s", a, r.differ, len(qs), r)
		}
	}

	migrate("removing c", "DELETE", "/v1/shards/c", nil, 100000, "a")
	_, parts, epoch = migrationOf(t, a2)
	t.Logf("after removing c: epoch %d, partitions %v", epoch, parts)
	if _, ok := parts["c"]; ok || parts["a"]+parts["b"] != shardmap.DefaultPartitions {
		t.Errorf("after removing c: partitions %v", parts)
	}
	for _, z := range zones {
		if h := holders(z); len(h) != 1 || h[0] == "c" {
			t.Errorf("after removing c, zone %s is held by shards %v", z, h)
		}
	}
	compare("after removing c")
}

// noSOA returns rrs without SOA records (a router's serial for a moved
// zone is its shard's, which the reference's need not equal).
func noSOA(rrs []dns.RR) []dns.RR {
	var out []dns.RR
	for _, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeSOA {
			out = append(out, rr)
		}
	}
	return out
}

// exportOf reads zone's records from a member's API (GET /v1/zones/{zone}).
func exportOf(t *testing.T, a harness.API, zone string) []dns.RR {
	t.Helper()
	var text string
	if code, err := a.Do("GET", "/v1/zones/"+zone, nil, &text); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/zones/%s: %d %v", zone, code, err)
	}
	var rrs []dns.RR
	zp := dns.NewZoneParser(strings.NewReader(text), zone, "")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		rrs = append(rrs, rr)
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("the export of %s: %v", zone, err)
	}
	return rrs
}

// minus returns the records of a that b lacks (at most 5, as text).
func minus(a, b []dns.RR) []string {
	in := map[string]bool{}
	for _, rr := range b {
		in[rr.String()] = true
	}
	var out []string
	for _, rr := range a {
		if !in[rr.String()] && len(out) < 5 {
			out = append(out, rr.String())
		}
	}
	return out
}
