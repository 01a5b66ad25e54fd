package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/txn"

	"github.com/miekg/dns"
)

// startRouterEnv is startRouterWith with env added to the router's
// environment and its Corefile unchanged.
func (s *sharded) startRouterEnv(t *testing.T, name string, env []string) *router {
	t.Helper()
	r := s.newRouter(t, name)
	return s.launch(t, r, s.routerCorefile(r), env...)
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

// shardsView is a router's GET /v1/shards.
type shardsView struct {
	Epoch  uint64 `json:"epoch"`
	Shards []struct {
		Name    string `json:"name"`
		Members []struct {
			Addr string `json:"addr"`
		} `json:"members"`
		API          []string `json:"api"`
		Records      *int     `json:"records"`
		RecordsError string   `json:"records_error"`
	} `json:"shards"`
}

func shardsOf(t *testing.T, a harness.API) shardsView {
	t.Helper()
	var v shardsView
	if code, err := a.Do("GET", "/v1/shards", nil, &v); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/shards at %s: %d %v", a.Base, code, err)
	}
	return v
}

// membersOf returns the member addresses a router lists for shard.
func (v shardsView) membersOf(shard string) []string {
	var out []string
	for _, s := range v.Shards {
		if s.Name == shard {
			for _, m := range s.Members {
				out = append(out, m.Addr)
			}
		}
	}
	return out
}

// TestShardMapPutShard (issue 51): PUT /v1/shards/{name} on one router
// replaces a shard's member list through the map: bad input is a 4xx
// JSON error that changes nothing (no token, an empty list, a member of
// another shard, API URLs that do not pair with the members, an unknown
// shard); a good one commits the next epoch, and both routers route by it
// (the other within about a second: measured, logged) and no longer ask
// the member it dropped; GET /v1/shards counts each shard's records.
func TestShardMapPutShard(t *testing.T) {
	wd := harness.Workdir(t)
	spec := routerSpec{zones: []string{"."}, key: "name", mapSeed: true}
	s := startSharded(t, wd, 2, 3, []string{"."}, spec)
	const token = "put-shard-test-token-0123456789abcdef"
	r2 := s.startRouterWith(t, "router-token", func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "api" {
				out = append(out, "        token "+token)
			}
			out = append(out, l)
		}
		return out
	})
	r1 := s.routers[0]
	a1 := r1.client()
	a2 := harness.API{Base: r2.client().Base, Token: token}
	for _, a := range []harness.API{a1, a2} {
		harness.Eventually(t, a.Base+" at epoch 1", 20*time.Second, func() bool {
			return shardsOf(t, a).Epoch == 1
		})
	}
	const origin = "put.test."
	putZone(t, a1, origin, smallZone(origin, 30))
	v := shardsOf(t, a1)
	total := 0
	for _, sh := range v.Shards {
		if sh.Records == nil || *sh.Records < 3 {
			t.Errorf("shard %s: records %v (%s): expected at least the apex's 3", sh.Name, sh.Records, sh.RecordsError)
		} else {
			total += *sh.Records
		}
	}
	// Each shard holds the apex SOA, NS and the glue ns1 of its own.
	if total < 30 {
		t.Errorf("the shards hold %d records in all, expected at least the zone's 30 names", total)
	}

	ms := s.members["a"]
	body := func(members ...*shardMember) map[string][]string {
		b := map[string][]string{"members": {}, "api": {}}
		for _, m := range members {
			b["members"] = append(b["members"], m.addr())
			b["api"] = append(b["api"], m.client().Base)
		}
		return b
	}
	for _, tc := range []struct {
		what string
		a    harness.API
		path string
		body any
		code int
	}{
		{"no token", r2.client(), "/v1/shards/a", body(ms[0], ms[1]), http.StatusUnauthorized},
		{"an empty list", a1, "/v1/shards/a", body(), http.StatusBadRequest},
		{"a member of shard b", a1, "/v1/shards/a", body(ms[0], s.members["b"][0]), http.StatusBadRequest},
		{"API URLs that do not pair", a1, "/v1/shards/a", map[string][]string{"members": {ms[0].addr()}, "api": {}}, http.StatusBadRequest},
		{"a malformed address", a1, "/v1/shards/a", map[string][]string{"members": {"no port"}, "api": {ms[0].client().Base}}, http.StatusBadRequest},
		{"an unknown field", a1, "/v1/shards/a", map[string]any{"members": []string{ms[0].addr()}, "api": []string{ms[0].client().Base}, "epoch": 9}, http.StatusBadRequest},
		{"an unknown shard", a1, "/v1/shards/z", body(ms[0]), http.StatusNotFound},
	} {
		var e struct {
			Error string `json:"error"`
		}
		code, err := tc.a.Do("PUT", tc.path, tc.body, &e)
		if err != nil || code != tc.code || e.Error == "" {
			t.Errorf("%s: %d %v %q, expected %d with an error", tc.what, code, err, e.Error, tc.code)
		}
	}
	if e := shardsOf(t, a1).Epoch; e != 1 {
		t.Fatalf("bad input changed the map: epoch %d", e)
	}

	// a3 leaves the map.
	var ans shardmap.Answer
	start := time.Now()
	if code, err := a2.Do("PUT", "/v1/shards/a", body(ms[0], ms[1]), &ans); err != nil || code != http.StatusOK || ans.Map == nil || ans.Map.Epoch != 2 {
		t.Fatalf("PUT /v1/shards/a: %d %v %+v", code, err, ans)
	}
	want := ms[0].addr() + " " + ms[1].addr()
	if got := strings.Join(shardsOf(t, a2).membersOf("a"), " "); got != want {
		t.Errorf("the router that changed the map routes shard a to %s, expected %s", got, want)
	}
	harness.Eventually(t, "router-1 at epoch 2", 5*time.Second, func() bool {
		v := shardsOf(t, a1)
		return v.Epoch == 2 && strings.Join(v.membersOf("a"), " ") == want
	})
	t.Logf("router-1 routed by epoch 2 %v after the PUT answered", time.Since(start).Round(time.Millisecond))
	for _, m := range s.members["a"] {
		harness.Eventually(t, m.name+" at epoch 2", 5*time.Second, func() bool { return memberMap(t, m).Epoch == 2 })
	}

	// Neither router asks a3 any more: stopped, it is never missed.
	ms[2].p.Kill()
	onA := namesOn(t, s, origin, "a", "h", 5)
	a3 := `member="` + ms[2].addr() + `"`
	for _, r := range []*router{r1, r2} {
		before := answersFrom(t, r, a3)
		for i := 0; i < 4; i++ {
			for _, name := range onA {
				m, err := harness.Query(r.addr(), name, dns.TypeA)
				if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
					t.Fatalf("%s: %s with a3 out of the map and stopped: %v %v", r.name, name, m, err)
				}
			}
		}
		if n := answersFrom(t, r, a3); n != before {
			t.Errorf("%s: %v answers from a3 after the map dropped it, %v before: it still asks it", r.name, n, before)
		}
	}

	// a3 back: epoch 3, three members on both routers. Shard a first has
	// a leader again (a3 may have led it when it was killed).
	ms[2].p.Restart()
	for _, m := range ms {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", m.ready), m.p)
	}
	var back struct {
		Map   *shardmap.Map `json:"map"`
		Error string        `json:"error"`
	}
	if code, err := a1.Do("PUT", "/v1/shards/a", body(ms...), &back); err != nil || code != http.StatusOK || back.Map == nil || back.Map.Epoch != 3 {
		t.Fatalf("PUT /v1/shards/a with a3 back: %d %v %s", code, err, back.Error)
	}
	for _, a := range []harness.API{a1, a2} {
		harness.Eventually(t, a.Base+" at epoch 3", 5*time.Second, func() bool {
			v := shardsOf(t, a)
			return v.Epoch == 3 && len(v.membersOf("a")) == 3
		})
	}

	// How long the other router takes to route by a new epoch (logged, not
	// asserted: the aim is a second): shard b's members in turn
	// first, through alternate routers.
	mb := s.members["b"]
	var took []time.Duration
	for i := 1; i <= 6; i++ {
		from, other := a1, a2
		if i%2 == 0 {
			from, other = a2, a1
		}
		order := append(slices.Clone(mb[i%3:]), mb[:i%3]...)
		if code, err := from.Do("PUT", "/v1/shards/b", body(order...), &ans); err != nil || code != http.StatusOK {
			t.Fatalf("PUT /v1/shards/b: %d %v", code, err)
		}
		start := time.Now()
		harness.Eventually(t, other.Base+" at the new epoch", 10*time.Second, func() bool {
			return shardsOf(t, other).Epoch == ans.Map.Epoch
		})
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("map change to the other router routing by it, 6 changes: min %v median %v max %v",
		took[0].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}

// TestShardMapUnreachable (issue 51): a router cut off from every member
// (all of them stopped with SIGSTOP: they take connections and answer
// nothing) keeps its map (the epoch and the shards it routes by), says it
// cannot read it (shard_map_unreachable 1, /ready not 200), and answers
// by it again, without seeding anything, once the members do.
func TestShardMapUnreachable(t *testing.T) {
	wd := harness.Workdir(t)
	spec := routerSpec{zones: []string{"."}, key: "name", mapSeed: true, timeout: "500ms"}
	s := startSharded(t, wd, 2, 3, []string{"."}, spec)
	r := s.routers[0]
	harness.Eventually(t, "router at epoch 1", 20*time.Second, func() bool {
		e, _ := routerEpoch(r)
		return e == 1
	})
	const origin = "cut.test."
	putZone(t, r.client(), origin, smallZone(origin, 10))
	ready := fmt.Sprintf("http://127.0.0.1:%d/ready", r.rdy)
	var all []*shardMember
	for _, sh := range s.shards {
		all = append(all, s.members[sh]...)
	}
	for _, m := range all {
		if err := m.p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	cont := func() {
		for _, m := range all {
			m.p.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(cont)
	harness.Eventually(t, "shard_map_unreachable 1", 20*time.Second, func() bool {
		return metricSum(t, routerMetrics(t, r), "coredns_craftroute_shard_map_unreachable") == 1
	})
	if resp, err := http.Get(ready); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("/ready answered 200 while the router reaches no member")
		}
	}
	if e, shards := routerEpoch(r); e != 1 || strings.Join(shards, " ") != "a b" {
		t.Errorf("cut off, the router routes by epoch %d over %v, expected its last map (1, a b)", e, shards)
	}
	cont()
	harness.Eventually(t, "shard_map_unreachable 0", 20*time.Second, func() bool {
		return metricSum(t, routerMetrics(t, r), "coredns_craftroute_shard_map_unreachable") == 0
	})
	harness.Eventually(t, "answers again", 20*time.Second, func() bool {
		m, err := harness.Query(r.addr(), "h1."+origin, dns.TypeA)
		return err == nil && m.Rcode == dns.RcodeSuccess && len(m.Answer) == 1
	})
	if e, _ := routerEpoch(r); e != 1 {
		t.Errorf("after the cut the router is at epoch %d, expected 1", e)
	}
	if strings.Count(r.p.Logs(), "seeded the shard map") > 1 {
		t.Error("the router seeded a map again")
	}
}

// answersFrom is how many answers router r counted from the member its
// label member (`member="addr"`) names: 0 before any.
func answersFrom(t *testing.T, r *router, member string) float64 {
	t.Helper()
	m := routerMetrics(t, r)
	if _, ok := m["coredns_craftroute_requests_total"]; !ok {
		return 0
	}
	return metricSum(t, m, "coredns_craftroute_requests_total", member)
}
