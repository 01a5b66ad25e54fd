package integration

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
)

// routerEpoch reads GET /v1/shards of router r: the epoch of the shard map
// it routes by and its shards' names.
func routerEpoch(r *router) (uint64, []string) {
	var out struct {
		Epoch  uint64 `json:"epoch"`
		Shards []struct {
			Name string `json:"name"`
		} `json:"shards"`
	}
	if code, err := r.client().Do("GET", "/v1/shards", nil, &out); err != nil || code != http.StatusOK {
		return 0, nil
	}
	var names []string
	for _, s := range out.Shards {
		names = append(names, s.Name)
	}
	return out.Epoch, names
}

// startRouterWith starts one more router of s, whose Corefile is the
// sharded example's with its craftroute lines passed through edit.
func (s *sharded) startRouterWith(t *testing.T, name string, edit func(lines []string) []string) *router {
	t.Helper()
	r := s.newRouter(t, name)
	return s.launch(t, r, strings.Join(edit(strings.Split(s.routerCorefile(r), "\n")), "\n"))
}

// newRouter returns one more router of s (key mode name, the map by
// shard_seed), on ports of its own, not started.
func (s *sharded) newRouter(t *testing.T, name string) *router {
	return &router{name: name, spec: routerSpec{zones: []string{"."}, key: "name", mapSeed: true}, dns: harness.ListenPort(t), api: harness.ListenPort(t), metrics: harness.ListenPort(t), rdy: harness.ListenPort(t)}
}

// launch starts router r of s from Corefile text, with env added to its
// environment, and waits until it is ready.
func (s *sharded) launch(t *testing.T, r *router, text string, env ...string) *router {
	t.Helper()
	writeFile(t, filepath.Join(s.wd, r.name+".Corefile"), text)
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

// TestShardMapAgreed (issue 51): the routers of the sharded example agree
// on one shard map. The first to find no map seeds epoch 1 from its
// Corefile into every shard's Raft state (every member holds it); both
// route by it. A router whose Corefile names only a shard_seed learns the
// map from that one member and answers names on every shard; one whose
// Corefile lists only shard a follows the map and says it differs.
func TestShardMapAgreed(t *testing.T) {
	wd := harness.Workdir(t)
	spec := routerSpec{zones: []string{"."}, key: "name", mapSeed: true}
	s := startSharded(t, wd, 2, 3, []string{"."}, spec, spec)
	for _, r := range s.routers {
		harness.Eventually(t, r.name+" at epoch 1", 20*time.Second, func() bool {
			e, shards := routerEpoch(r)
			return e == 1 && strings.Join(shards, " ") == "a b"
		})
	}
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			harness.Eventually(t, m.name+" holding the map", 10*time.Second, func() bool {
				var a shardmap.Answer
				code, err := m.client().Do("GET", shardmap.MapPath, nil, &a)
				return err == nil && code == http.StatusOK && a.Map != nil && a.Map.Epoch == 1 && len(a.Map.Shards) == 2 &&
					a.Map.Shards[0].Name == "a" && len(a.Map.Shards[1].Members) == 3
			})
		}
	}

	const origin = "map.test."
	putZone(t, s.routers[0].client(), origin, smallZone(origin, 40))
	onB := namesOn(t, s, origin, "b", "h", 3)

	seedOnly := s.startRouterWith(t, "router-seed", func(lines []string) []string {
		var out []string
		for _, l := range lines {
			switch f := strings.Fields(l); {
			case len(f) > 0 && (f[0] == "shard" || f[0] == "shard_api"):
			case len(f) > 0 && f[0] == "shard_seed":
				out = append(out, "        shard_seed "+s.members["a"][1].client().Base)
			default:
				out = append(out, l)
			}
		}
		return out
	})
	onlyA := s.startRouterWith(t, "router-a", func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 1 && (f[0] == "shard" || f[0] == "shard_api") && f[1] == "b" {
				continue
			}
			out = append(out, l)
		}
		return out
	})
	for _, r := range []*router{seedOnly, onlyA} {
		if e, shards := routerEpoch(r); e != 1 || strings.Join(shards, " ") != "a b" {
			t.Errorf("%s: expected epoch 1 with shards a b, got %d %v", r.name, e, shards)
		}
		for _, name := range onB {
			m, err := harness.Query(r.addr(), name, dns.TypeA)
			if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
				t.Errorf("%s: %s on shard b: %v %v", r.name, name, m, err)
			}
		}
	}
	if !strings.Contains(onlyA.p.Logs(), "differ from the agreed shard map") {
		t.Error("the router whose Corefile lists only shard a did not say that it differs from the map")
	}
	if strings.Contains(s.routers[1].p.Logs(), "differ from the agreed shard map") {
		t.Error("a router whose Corefile is the map said that it differs")
	}
}
