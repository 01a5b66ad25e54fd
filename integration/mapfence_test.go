package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/txn"

	"github.com/miekg/dns"
)

// startRouterEnv is startRouterWith with env added to the router's
// environment.
func (s *sharded) startRouterEnv(t *testing.T, name string, env []string) *router {
	t.Helper()
	r := &router{name: name, spec: routerSpec{zones: []string{"."}, key: "name", mapSeed: true}, dns: harness.ListenPort(t), api: harness.ListenPort(t), metrics: harness.ListenPort(t), rdy: harness.ListenPort(t)}
	writeFile(t, filepath.Join(s.wd, r.name+".Corefile"), s.routerCorefile(r))
	r.p = harness.StartEnv(t, r.name, s.wd, r.name+".Corefile", env...)
	s.procs = append(s.procs, r.p)
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", r.rdy), s.procs...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log (last 4 KiB):\n%s", r.name, tail(r.p.Logs(), 4096))
		}
	})
	return r
}

// memberMap reads the shard map member m applied.
func memberMap(t *testing.T, m *shardMember) *shardmap.Map {
	t.Helper()
	var a shardmap.Answer
	if code, err := m.client().Do("GET", shardmap.MapPath, nil, &a); err != nil || code != http.StatusOK || a.Map == nil {
		t.Fatalf("%s: GET %s: %d %v", m.name, shardmap.MapPath, code, err)
	}
	return a.Map
}

// commitMap commits m on every shard of s through the members' own
// transaction API, as a router does (a part on every shard, the decision
// at the first), so that a test can change what a router's API does not
// (the ring). The shards' data are not moved: a test changes the ring of
// a zone whose names it places itself.
func commitMap(t *testing.T, s *sharded, m *shardmap.Map) {
	t.Helper()
	post := func(sm *shardMember, path string, body, out any) {
		t.Helper()
		var rd *bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		} else {
			rd = bytes.NewReader(nil)
		}
		resp, err := http.Post(sm.client().Base+path, "application/json", rd)
		if err != nil {
			t.Fatalf("POST %s on %s: %v", path, sm.name, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s on %s: %d", path, sm.name, resp.StatusCode)
		}
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
	}
	id := txn.NewID()
	co := s.members[s.shards[0]]
	var apis []string
	for _, sm := range co {
		apis = append(apis, sm.client().Base)
	}
	for _, sh := range s.shards {
		var v txn.Vote
		post(s.members[sh][0], txn.PreparePath(id), txn.Prepare{Map: m, Shard: sh, Participants: s.shards,
			Coordinator: txn.Coordinator{Shard: s.shards[0], APIs: apis}}, &v)
		if !v.Yes {
			t.Fatalf("shard %s voted no on the map at epoch %d: %+v", sh, m.Epoch, v)
		}
	}
	var d txn.Decision
	post(co[0], txn.DecidePath(id), txn.Decide{Outcome: txn.Commit}, &d)
	if d.Outcome != txn.Commit {
		t.Fatalf("decision: %+v", d)
	}
	for _, sh := range s.shards {
		post(s.members[sh][0], txn.FinishPath(id, txn.Commit), nil, nil)
	}
}

// movedName returns a name of origin, prefixed prefix, that ring from
// places on shard was and ring to on another shard.
func movedName(t *testing.T, from, to *shardmap.Map, origin, prefix, was string) (string, string) {
	t.Helper()
	rf, err := from.Ring()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := to.Ring()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10000; i++ {
		n := fmt.Sprintf("%s%d.%s", prefix, i, origin)
		if rf.Locate(n) == was && rt.Locate(n) != was {
			return n, rt.Locate(n)
		}
	}
	t.Fatalf("no name of %s moves from shard %s", origin, was)
	return "", ""
}

// TestShardMapFenced (issue 51): a router that holds an old shard map
// (CRAFTROUTE_TEST_HOLD_MAP: it reads the map again only when a member
// fences it) is fenced by the members once the ring changed. Its query
// for a name the old ring gives shard a and the new one shard b is
// refused by a, and answered right after it read the map; its UPDATE of
// such a name is refused by the old owner, routed again by the new map
// and applied on the new owner only, never on the wrong shard. The
// members and the router count it.
func TestShardMapFenced(t *testing.T) {
	wd := harness.Workdir(t)
	spec := routerSpec{zones: []string{"."}, key: "name", mapSeed: true}
	s := startSharded(t, wd, 2, 3, []string{"."}, spec)
	r1 := s.routers[0]
	harness.Eventually(t, "router at epoch 1", 20*time.Second, func() bool {
		e, _ := routerEpoch(r1)
		return e == 1
	})
	held := s.startRouterEnv(t, "router-held", []string{"CRAFTROUTE_TEST_HOLD_MAP=1"})
	if e, _ := routerEpoch(held); e != 1 {
		t.Fatalf("the held router is at epoch %d, expected 1", e)
	}
	const origin = "fence.test."
	putZone(t, r1.client(), origin, smallZone(origin, 0))

	// Epoch 2: another ring (a partition count of its own).
	m1 := memberMap(t, s.members["a"][0])
	m2 := m1.Clone()
	m2.Epoch, m2.Partitions = 2, m1.Partitions+10
	commitMap(t, s, m2)
	harness.Eventually(t, "router-1 at epoch 2", 5*time.Second, func() bool {
		e, _ := routerEpoch(r1)
		return e == 2
	})
	if e, _ := routerEpoch(held); e != 1 {
		t.Fatalf("the held router read the map on its own: epoch %d", e)
	}

	// A name the old ring gives a, the new one b, written by router-1.
	y, yOwner := movedName(t, m1, m2, origin, "q", "a")
	if code, err := r1.client().Do("POST", "/v1/zones/"+origin+"/records",
		map[string]any{"add": []string{y + " 300 A 192.0.2.1"}}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("adding %s through router-1: %d %v", y, code, err)
	}
	r, err := harness.Query(held.addr(), y, dns.TypeA)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("the held router's answer for %s (shard %s at epoch 2): %v %v", y, yOwner, r, err)
	}
	if e, _ := routerEpoch(held); e != 2 {
		t.Errorf("after a fenced query the held router is at epoch %d, expected 2", e)
	}
	if n := metricSum(t, routerMetrics(t, held), "coredns_craftroute_stale_map_total"); n < 1 {
		t.Errorf("stale_map_total %v after a fenced query", n)
	}

	// Epoch 3: the ring changes again; the held router stays at 2.
	m3 := m2.Clone()
	m3.Epoch, m3.Partitions = 3, m1.Partitions
	commitMap(t, s, m3)
	z, zOwner := movedName(t, m2, m3, origin, "u", "a")
	out, ok := sendUpdate(t, held.addr(), origin, "update add "+z+" 300 A 192.0.2.2")
	if !ok {
		t.Fatalf("UPDATE of %s through the held router: %s", z, out)
	}
	if e, _ := routerEpoch(held); e != 3 {
		t.Errorf("after a fenced UPDATE the held router is at epoch %d, expected 3", e)
	}
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			harness.Eventually(t, m.name+" on "+z, 5*time.Second, func() bool {
				r, err := harness.Query(m.addr(), z, dns.TypeA)
				if err != nil {
					return false
				}
				if sh == zOwner {
					return r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1
				}
				return r.Rcode == dns.RcodeNameError
			})
		}
	}
	if n := metricSum(t, routerMetrics(t, held), "coredns_craftroute_stale_map_total"); n < 2 {
		t.Errorf("stale_map_total %v after a fenced query and a fenced UPDATE", n)
	}
	// A request that says no epoch, or a bad one, to a member's API.
	req, _ := http.NewRequest("GET", s.members["a"][0].client().Base+"/v1/zones", nil)
	req.Header.Set(shardmap.EpochHeader, "x")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a malformed epoch header: %v %v, expected 400", resp, err)
	}
	req.Header.Set(shardmap.EpochHeader, "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("a zone list routed by epoch 2 after the ring of 3: %v %v, expected 409", resp, err)
	}
	var st shardmap.Stale
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if !st.StaleMap || st.Epoch != 3 || st.Map != shardmap.MapPath || !strings.Contains(st.Error, "epoch 2") {
		t.Errorf("the refusal: %+v", st)
	}
}
