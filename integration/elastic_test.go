package integration

import (
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
)

// Elastic shards (issue 52): a shard added to the map and removed from it
// online, through real members and two routers.

// startShard starts shard name (size members serving zones) beside s's
// shards: its members are in s.members, not in s.shards, so that no
// router's Corefile lists it.
func (s *sharded) startShard(t *testing.T, name string, size int, zones []string) []*shardMember {
	t.Helper()
	var ms []*shardMember
	for j := 1; j <= size; j++ {
		ms = append(ms, &shardMember{name: fmt.Sprintf("%s%d", name, j), shard: name,
			dns: harness.ListenPort(t), api: harness.ListenPort(t), raft: harness.ListenPort(t), ready: harness.ListenPort(t)})
	}
	for _, m := range ms {
		writeFile(t, filepath.Join(s.wd, m.name+".Corefile"), memberCorefile(zones, m, ms, nil))
		m.p = harness.Start(t, m.name, s.wd, m.name+".Corefile")
		s.procs = append(s.procs, m.p)
	}
	for _, m := range ms {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", m.ready), s.procs...)
	}
	s.members[name] = ms
	return ms
}

// shardBody is the body of POST /v1/shards for members ms.
func shardBody(name string, ms ...*shardMember) map[string]any {
	b := map[string]any{"name": name, "members": []string{}, "api": []string{}}
	for _, m := range ms {
		b["members"] = append(b["members"].([]string), m.addr())
		b["api"] = append(b["api"].([]string), m.client().Base)
	}
	return b
}

// migrationOf reads GET /v1/shards of a router: the migration (nil when
// none runs) and each shard's partitions.
func migrationOf(t *testing.T, a harness.API) (*struct {
	Kind, Shard, Error string
	Moves, Moved       int
	Remaining          int
}, map[string]int, uint64) {
	var out struct {
		Epoch     uint64 `json:"epoch"`
		Migrating *struct {
			Kind, Shard, Error string
			Moves, Moved       int
			Remaining          int
		} `json:"migrating"`
		Shards []struct {
			Name       string `json:"name"`
			Partitions int    `json:"partitions"`
		} `json:"shards"`
	}
	if code, err := a.Do("GET", "/v1/shards", nil, &out); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/shards: %d %v", code, err)
	}
	parts := map[string]int{}
	for _, s := range out.Shards {
		parts[s.Name] = s.Partitions
	}
	return out.Migrating, parts, out.Epoch
}

// migrationLoad writes names through both routers and the reference while
// it runs, and compares answers of both routers with the reference's for
// sample; stop ends it and returns the names written and what differed.
type migrationLoad struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	written []string
	differ  atomic.Int64
	report  []string
	mu      sync.Mutex
	rounds  atomic.Int64
	// lenient: a shard's leader is killed meanwhile: writes may fail
	// (5xx: no quorum, nothing acknowledged) and queries SERVFAIL while
	// it has none; answers must not differ otherwise.
	lenient     bool
	unavailable atomic.Int64
	roundTime   atomic.Int64 // ns in all
	failed      atomic.Int64 // writes that did not succeed (they must not)
	transfers   atomic.Int64 // AXFRs through the routers (transfer)
	torn        atomic.Int64 // of them, not one snapshot of the zone
}

// transfer transfers origin through the routers in turn while the load
// runs: each AXFR must be one snapshot of the zone, framed by one SOA,
// with every record once: base's records (a transfer before the load, the
// SOA aside) and names the load wrote (w<i>, i >= from), nothing else.
// (Writes of one name are not transactions: which of those a transfer
// holds is not checked.)
func (l *migrationLoad) transfer(addrs []string, origin string, base []dns.RR, from int) {
	want := map[string]bool{}
	for _, rr := range base {
		if rr.Header().Rrtype != dns.TypeSOA {
			want[rrKey(rr)] = true
		}
	}
	l.wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			rrs, err := axfrIn(addrs[i%2], origin)
			if err != nil || len(rrs) < 2 {
				continue // a refused or cut transfer is retried by a secondary, and is no torn one
			}
			l.transfers.Add(1)
			var bad []string
			if soaOf(rrs[0]) == 0 || soaOf(rrs[0]) != soaOf(rrs[len(rrs)-1]) {
				bad = append(bad, fmt.Sprintf("framed by %v ... %v", rrs[0], rrs[len(rrs)-1]))
			}
			got := map[string]int{}
			for _, rr := range rrs[1 : len(rrs)-1] {
				k := rrKey(rr)
				got[k]++
				if got[k] == 2 {
					bad = append(bad, "twice: "+k)
				}
				var n int
				if !want[k] && rr.Header().Rrtype != dns.TypeSOA {
					if _, err := fmt.Sscanf(rr.Header().Name, "w%d.", &n); err != nil || n < from {
						bad = append(bad, "not in the zone: "+k)
					}
				}
			}
			for k := range want {
				if got[k] == 0 {
					bad = append(bad, "missing: "+k)
				}
			}
			if len(bad) > 0 {
				l.torn.Add(1)
				l.mu.Lock()
				if len(l.report) < 10 {
					l.report = append(l.report, fmt.Sprintf("AXFR through %s: %d records, not one snapshot: %d faults, first %v", addrs[i%2], len(rrs), len(bad), bad[:min(5, len(bad))]))
				}
				l.mu.Unlock()
			}
		}
	})
}

func startMigrationLoad(t *testing.T, routers []*router, single harness.API, singleAddr, origin string, sample []dnsdiff.Query, from int, lenient bool) *migrationLoad {
	l := &migrationLoad{stop: make(chan struct{}), lenient: lenient}
	addrs := []string{routers[0].addr(), routers[1].addr()}
	l.wg.Go(func() {
		for i := from; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			name := fmt.Sprintf("w%d.%s", i, origin)
			rr := fmt.Sprintf("%s 300 IN A 192.0.2.%d", name, i%250+1)
			var out map[string]any
			code, err := routers[i%2].client().Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": []string{rr}}, &out)
			if l.lenient && err == nil && code >= 500 {
				l.unavailable.Add(1)
				continue
			}
			if err != nil || code != http.StatusOK {
				l.failed.Add(1)
				l.mu.Lock()
				if len(l.report) < 10 {
					l.report = append(l.report, fmt.Sprintf("write %s through router %d: %d %v %v", name, i%2+1, code, err, out))
				}
				l.mu.Unlock()
				continue
			}
			if code, err := single.Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": []string{rr}}, &out); err != nil || code != http.StatusOK {
				t.Errorf("write %s to the reference: %d %v", name, code, err)
			}
			// What one router acknowledged, the other answers.
			r, err := harness.Query(addrs[(i+1)%2], name, dns.TypeA)
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				l.differ.Add(1)
				l.mu.Lock()
				if len(l.report) < 10 {
					l.report = append(l.report, fmt.Sprintf("%s written through router %d, through the other: %v %v", name, i%2+1, r, err))
				}
				l.mu.Unlock()
			}
			l.mu.Lock()
			l.written = append(l.written, name)
			l.mu.Unlock()
		}
	})
	l.wg.Go(func() {
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			began := time.Now()
			res := compareWithRef(singleAddr, addrs, sample, true)
			l.rounds.Add(1)
			l.roundTime.Add(int64(time.Since(began)))
			for _, a := range addrs {
				r := res[a]
				if l.lenient {
					// A shard without a leader answers SERVFAIL:
					// counted, not failed; every other difference fails.
					l.unavailable.Add(int64(r.failed))
					r.differ -= r.failed
				}
				if r.differ > 0 {
					l.differ.Add(int64(r.differ))
					l.mu.Lock()
					if len(l.report) < 10 {
						l.report = append(l.report, fmt.Sprintf("%s: %d answers differ: %s", a, r.differ, r))
					}
					l.mu.Unlock()
				}
			}
		}
	})
	return l
}

func (l *migrationLoad) end(t *testing.T, what string) []string {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	t.Logf("%s: %d names written, %d comparison rounds (%v in all), %d answers differed, %d writes failed; unavailable: %d (writes refused 5xx, queries SERVFAIL); %d transfers through the routers, %d not one snapshot", what, len(l.written), l.rounds.Load(), time.Duration(l.roundTime.Load()).Round(time.Millisecond), l.differ.Load(), l.failed.Load(), l.unavailable.Load(), l.transfers.Load(), l.torn.Load())
	if l.differ.Load() > 0 || l.failed.Load() > 0 || l.rounds.Load() == 0 || l.torn.Load() > 0 {
		t.Errorf("%s: %d answers differed from the reference's, %d writes failed, %d rounds, %d of %d transfers torn:\n%s", what, l.differ.Load(), l.failed.Load(), l.rounds.Load(), l.torn.Load(), l.transfers.Load(), l.report)
	}
	return l.written
}

// waitMigration waits until router a's map has no migration, and fails on
// a timeout.
func waitMigration(t *testing.T, a harness.API, within time.Duration) {
	t.Helper()
	began := time.Now()
	harness.Eventually(t, "the migration to end", within, func() bool {
		g, _, _ := migrationOf(t, a)
		if g != nil && g.Error != "" {
			t.Logf("migration: %d of %d moved, last error: %s", g.Moved, g.Moves, g.Error)
		}
		return g == nil
	})
	t.Logf("the migration ended %v after it was started", time.Since(began).Round(time.Millisecond))
}

// TestShardAddRemove (issue 52): POST /v1/shards adds a third shard to two
// that hold a zone full of hard cases (wildcards, cuts, DNAMEs, ENTs),
// under writes through both routers and reads compared with one member
// holding the same zone: it answers 202, a second migration meanwhile is
// a 409, and when it ends the new shard owns about a third of the
// partitions and holds their names, no answer differed, no write failed
// and every write is read through both routers. DELETE /v1/shards/c then
// drains it the same way, and leaves it without zones. Bad input changes
// nothing: a name in the map, members that do not answer, a member of
// another shard, a group listed in part, an unknown shard.
func TestShardAddRemove(t *testing.T) {
	wd := harness.Workdir(t)
	const origin = "elastic.example."
	spec := routerSpec{zones: []string{origin}, key: "name", mapSeed: true, transfer: true}
	s := startSharded(t, wd, 2, 3, []string{origin}, spec, spec)
	singleAddr, single := startSingle(t, wd, []string{origin})
	text, queries := dnsdiff.GenerateZone(origin, 52, 2000)
	putZone(t, single, origin, text)
	a1, a2 := s.routers[0].client(), s.routers[1].client()
	harness.Eventually(t, "router 1 at epoch 1", 20*time.Second, func() bool { _, _, e := migrationOf(t, a1); return e >= 1 })
	putZone(t, a1, origin, text)
	sample := sampleQueries(queries, 10)
	var during []dnsdiff.Query // a round in well under a second: many while a migration runs
	for i, q := range sampleQueries(queries, 60) {
		if i%10 == 0 {
			during = append(during, q)
		}
	}
	res := compareWithRef(singleAddr, []string{s.routers[0].addr(), s.routers[1].addr()}, sample, true)
	for a, r := range res {
		if r.differ > 0 {
			t.Fatalf("before any migration, %s: %d answers differ: %s", a, r.differ, r)
		}
	}
	c := s.startShard(t, "c", 3, []string{origin})

	for _, tc := range []struct {
		what   string
		method string
		path   string
		body   any
		code   int
	}{
		{"a name in the map", "POST", "/v1/shards", shardBody("a", c...), http.StatusConflict},
		{"members that do not answer", "POST", "/v1/shards", map[string]any{"name": "c", "members": []string{c[0].addr()}, "api": []string{"http://127.0.0.1:1"}}, http.StatusBadRequest},
		{"a member of shard a", "POST", "/v1/shards", shardBody("c", c[0], c[1], s.members["a"][0]), http.StatusBadRequest},
		{"a group in part", "POST", "/v1/shards", shardBody("c", c[0], c[1]), http.StatusBadRequest},
		{"an unknown field", "POST", "/v1/shards", map[string]any{"name": "c", "members": []string{}, "epoch": 3}, http.StatusBadRequest},
		{"an unknown shard", "DELETE", "/v1/shards/z", nil, http.StatusNotFound},
	} {
		var e struct {
			Error string `json:"error"`
		}
		code, err := a1.Do(tc.method, tc.path, tc.body, &e)
		if err != nil || code != tc.code || e.Error == "" {
			t.Errorf("%s: %d %v %q, expected %d with an error", tc.what, code, err, e.Error, tc.code)
		}
	}
	if g, _, e := migrationOf(t, a1); g != nil || e != 1 {
		t.Fatalf("after bad input: migration %v at epoch %d, expected none at 1", g, e)
	}

	routerAddrs := []string{s.routers[0].addr(), s.routers[1].addr()}
	snapshot := func() []dns.RR {
		t.Helper()
		rrs, err := axfrIn(routerAddrs[0], origin)
		if err != nil || len(rrs) < 2 {
			t.Fatalf("AXFR of %s through router 1: %v (%d records)", origin, err, len(rrs))
		}
		return rrs
	}

	// Add c under load.
	base := snapshot()
	load := startMigrationLoad(t, s.routers, single, singleAddr, origin, during, 0, false)
	load.transfer(routerAddrs, origin, base, 0)
	time.Sleep(300 * time.Millisecond)
	var out map[string]any
	if code, err := a1.Do("POST", "/v1/shards", shardBody("c", c...), &out); err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /v1/shards c: %d %v %v", code, err, out)
	}
	t.Logf("POST /v1/shards c: %v", out)
	if code, err := a2.Do("DELETE", "/v1/shards/a", nil, &out); err != nil || code != http.StatusConflict {
		t.Errorf("DELETE /v1/shards/a while c is added: %d %v %v, expected 409", code, err, out)
	}
	waitMigration(t, a1, 90*time.Second)
	time.Sleep(300 * time.Millisecond)
	written := load.end(t, "adding c")
	_, parts, epoch := migrationOf(t, a1)
	t.Logf("after adding c: epoch %d, partitions %v", epoch, parts)
	if third := float64(shardmap.DefaultPartitions) / 3; float64(parts["c"]) < 0.8*third || float64(parts["c"]) > 1.2*third {
		t.Errorf("shard c owns %d partitions, expected about %.0f", parts["c"], third)
	}
	if n, err := zoneRecords(c[0].client(), origin); err != nil || n < 100 {
		t.Errorf("shard c holds %d records of %s (%v), expected its part", n, origin, err)
	}
	check := func(what string, written []string) {
		t.Helper()
		res := compareWithRef(singleAddr, []string{s.routers[0].addr(), s.routers[1].addr()}, sampleQueries(queries, 3), true)
		for a, r := range res {
			if r.differ > 0 {
				t.Errorf("%s, %s: %d answers differ: %s", what, a, r.differ, r)
			}
		}
		var qs []dnsdiff.Query
		for _, n := range written {
			qs = append(qs, dnsdiff.Query{Name: n, Type: dns.TypeA})
		}
		res = compareWithRef(singleAddr, []string{s.routers[0].addr(), s.routers[1].addr()}, qs, true)
		for a, r := range res {
			if r.differ > 0 {
				t.Errorf("%s, %s: %d of the %d names written differ: %s", what, a, r.differ, len(qs), r)
			}
		}
	}
	check("after adding c", written)

	// Remove it under load.
	base = snapshot()
	load = startMigrationLoad(t, s.routers, single, singleAddr, origin, during, 100000, false)
	load.transfer(routerAddrs, origin, base, 100000)
	time.Sleep(300 * time.Millisecond)
	if code, err := a2.Do("DELETE", "/v1/shards/c", nil, &out); err != nil || code != http.StatusAccepted {
		t.Fatalf("DELETE /v1/shards/c: %d %v %v", code, err, out)
	}
	waitMigration(t, a2, 90*time.Second)
	time.Sleep(300 * time.Millisecond)
	written = append(written, load.end(t, "removing c")...)
	_, parts, epoch = migrationOf(t, a2)
	t.Logf("after removing c: epoch %d, partitions %v", epoch, parts)
	if _, ok := parts["c"]; ok || parts["a"]+parts["b"] != shardmap.DefaultPartitions {
		t.Errorf("after removing c: partitions %v", parts)
	}
	harness.Eventually(t, "shard c to hold no zone", 10*time.Second, func() bool {
		n, err := zoneRecords(c[0].client(), origin)
		return err == nil && n == -1
	})
	check("after removing c", written)
	m := routerMetrics(t, s.routers[0])
	m2 := routerMetrics(t, s.routers[1])
	moved := m["coredns_craftroute_migrated_partitions_total"][""] + m2["coredns_craftroute_migrated_partitions_total"][""]
	t.Logf("the routers moved %v partitions (%v and %v records), held writes %v s in %v steps", moved,
		m["coredns_craftroute_migrated_records_total"][""], m2["coredns_craftroute_migrated_records_total"][""],
		m["coredns_craftroute_migration_hold_seconds_sum"][""]+m2["coredns_craftroute_migration_hold_seconds_sum"][""],
		m["coredns_craftroute_migration_hold_seconds_count"][""]+m2["coredns_craftroute_migration_hold_seconds_count"][""])
	if moved != 2*337 && moved < 2*300 {
		t.Errorf("the routers moved %v partitions in all, expected those to c and back", moved)
	}
}

// leaderOf returns the member of ms that leads their group (their ids are
// their names' digits).
func leaderOf(t *testing.T, ms []*shardMember) *shardMember {
	t.Helper()
	var leader uint64
	harness.Eventually(t, "a leader of shard "+ms[0].shard, 20*time.Second, func() bool {
		for _, m := range ms {
			var st struct{ Leader uint64 }
			if code, err := m.client().Do("GET", "/v1/cluster", nil, &st); err == nil && code == http.StatusOK && st.Leader >= 1 && int(st.Leader) <= len(ms) {
				leader = st.Leader
				return true
			}
		}
		return false
	})
	return ms[leader-1]
}

// waitMoved waits until router a's migration moved at least n partitions.
func waitMoved(t *testing.T, a harness.API, n int) {
	t.Helper()
	harness.Eventually(t, fmt.Sprintf("%d partitions moved", n), 30*time.Second, func() bool {
		g, _, _ := migrationOf(t, a)
		return g == nil || g.Moved >= n
	})
}

// TestShardMigrationKill (issue 52): kill -9 during migrations. Adding
// shard c, the router that drives it is killed: the other takes over from
// the map (after migrateStall) and finishes it, while the leader of the old
// owners' shard a is killed and comes back. Removing c, the leader of c is
// killed and comes back. A third router held at its map (it reads the map
// only when a shard fences it) answers throughout. Every answer through
// the surviving routers equals the reference's, and no write fails.
func TestShardMigrationKill(t *testing.T) {
	wd := harness.Workdir(t)
	const origin = "killed.example."
	spec := routerSpec{zones: []string{origin}, key: "name", mapSeed: true}
	s := startSharded(t, wd, 2, 3, []string{origin}, spec, spec)
	stale := s.startRouterEnv(t, "router-stale", []string{"CRAFTROUTE_TEST_HOLD_MAP=1"})
	singleAddr, single := startSingle(t, wd, []string{origin})
	text, queries := dnsdiff.GenerateZone(origin, 53, 2000)
	putZone(t, single, origin, text)
	a1, a2 := s.routers[0].client(), s.routers[1].client()
	harness.Eventually(t, "router 1 at epoch 1", 20*time.Second, func() bool { _, _, e := migrationOf(t, a1); return e >= 1 })
	putZone(t, a1, origin, text)
	c := s.startShard(t, "c", 3, []string{origin})
	var during []dnsdiff.Query
	for i, q := range sampleQueries(queries, 60) {
		if i%10 == 0 {
			during = append(during, q)
		}
	}
	survivors := []*router{s.routers[1], stale}

	load := startMigrationLoad(t, survivors, single, singleAddr, origin, during, 0, true)
	var out map[string]any
	if code, err := a1.Do("POST", "/v1/shards", shardBody("c", c...), &out); err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /v1/shards c: %d %v %v", code, err, out)
	}
	waitMoved(t, a2, 40)
	s.routers[0].p.Kill()
	t.Logf("router 1, driving the migration, killed")
	time.Sleep(2 * time.Second)
	la := leaderOf(t, s.members["a"])
	la.p.Kill()
	t.Logf("%s, the leader of shard a, killed", la.name)
	time.Sleep(3 * time.Second)
	la.p.Restart()
	waitMigration(t, a2, 120*time.Second)
	written := load.end(t, "adding c, router 1 and a's leader killed")
	_, parts, _ := migrationOf(t, a2)
	if parts["c"] == 0 || parts["a"]+parts["b"]+parts["c"] != shardmap.DefaultPartitions {
		t.Errorf("after adding c: partitions %v", parts)
	}

	load = startMigrationLoad(t, survivors, single, singleAddr, origin, during, 100000, true)
	if code, err := a2.Do("DELETE", "/v1/shards/c", nil, &out); err != nil || code != http.StatusAccepted {
		t.Fatalf("DELETE /v1/shards/c: %d %v %v", code, err, out)
	}
	waitMoved(t, a2, 40)
	lc := leaderOf(t, c)
	lc.p.Kill()
	t.Logf("%s, the leader of shard c, killed", lc.name)
	time.Sleep(3 * time.Second)
	lc.p.Restart()
	waitMigration(t, a2, 120*time.Second)
	written = append(written, load.end(t, "removing c, c's leader killed")...)
	_, parts, _ = migrationOf(t, a2)
	if _, ok := parts["c"]; ok || parts["a"]+parts["b"] != shardmap.DefaultPartitions {
		t.Errorf("after removing c: partitions %v", parts)
	}
	var qs []dnsdiff.Query
	for _, n := range written {
		qs = append(qs, dnsdiff.Query{Name: n, Type: dns.TypeA})
	}
	qs = append(qs, sampleQueries(queries, 6)...)
	for a, r := range compareWithRef(singleAddr, []string{s.routers[1].addr(), stale.addr()}, qs, true) {
		if r.differ > 0 {
			t.Errorf("after the migrations, %s: %d of %d answers differ: %s", a, r.differ, len(qs), r)
		}
	}
}
