package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
)

// Health-checked failover (issue 53): the group's leader probes a policy's
// values and commits what it finds; every member and the router answer by
// it, and a new leader starts from what its group committed.

// target is a TCP service a health check probes: it listens while up.
type target struct {
	addr string
	ln   net.Listener
}

func (tg *target) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", tg.addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", tg.addr, err)
	}
	tg.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

func (tg *target) down() { tg.ln.Close() }

func TestPolicyHealth(t *testing.T) {
	wd := harness.Workdir(t)
	s := startSharded(t, wd, 1, 3, []string{"."}, routerSpec{zones: []string{"."}, key: "name"})
	members := s.members["a"]
	r := s.routers[0]
	putZone(t, r.client(), "pol.test.", policyTestZone)

	// Two values on loopback addresses of their own, one port: each is
	// up while its listener is.
	port := harness.ListenPort(t)
	t2 := &target{addr: fmt.Sprintf("127.0.0.2:%d", port)}
	t3 := &target{addr: fmt.Sprintf("127.0.0.3:%d", port)}
	t2.up(t)
	t3.up(t)
	defer func() { t2.down(); t3.down() }()
	body := fmt.Sprintf(`{"pools": {"main": {"values": [{"value": "127.0.0.2"}, {"value": "127.0.0.3"}], "fallback": "backup"},
		"backup": {"values": [{"value": "192.0.2.99", "status": "up"}]}},
		"rules": [{"pool": "main"}],
		"check": {"protocol": "tcp", "port": %d, "interval": "500ms", "timeout": "300ms", "rise": 1, "fall": 1}}`, port)
	var out string
	if code, err := r.client().Do("PUT", "/v1/zones/pol.test./policies/www/A", json.RawMessage(body), &out); err != nil || code != http.StatusOK {
		t.Fatalf("PUT policy: %d %v %s", code, err, out)
	}

	// everywhere waits until every member and the router answer with
	// want alone, each of them (20 answers), and says how long it took.
	everywhere := func(what string, want ...string) time.Duration {
		t.Helper()
		start := time.Now()
		for _, addr := range append([]string{r.addr()}, memberAddrs(members)...) {
			harness.Eventually(t, what+" at "+addr, 20*time.Second, func() bool {
				c := split(t, addr, "www.pol.test.", "", 20, -1)
				n, all := 0, true
				for _, w := range want {
					n += c[w]
					all = all && c[w] > 0
				}
				return n == 20 && all
			})
		}
		d := time.Since(start)
		t.Logf("%s: every member and the router answer by it %v after the change", what, d.Round(time.Millisecond))
		return d
	}
	everywhere("both up", "127.0.0.2", "127.0.0.3")

	t2.down()
	everywhere("127.0.0.2 down", "127.0.0.3")
	t3.down()
	everywhere("both down: the fallback", "192.0.2.99")

	// The leader goes; the next starts from the state committed (both
	// down): the answers do not change, then follow the values again.
	leader := leaderOf(t, members)
	leader.p.Kill()
	time.Sleep(2 * time.Second)
	var rest []*shardMember
	for _, m := range members {
		if m != leader {
			rest = append(rest, m)
		}
	}
	for _, m := range rest {
		if c := split(t, m.addr(), "www.pol.test.", "", 20, -1); c["192.0.2.99"] != 20 {
			t.Errorf("after the leader went, %s: expected the fallback still, got %v", m.name, c)
		}
	}
	t2.up(t)
	start := time.Now()
	for _, m := range rest {
		harness.Eventually(t, "127.0.0.2 back at "+m.name, 20*time.Second, func() bool {
			return split(t, m.addr(), "www.pol.test.", "", 20, -1)["127.0.0.2"] == 20
		})
	}
	t.Logf("127.0.0.2 back under the new leader: answered by the members %v after it listened", time.Since(start).Round(time.Millisecond))
	leader.p.Restart()
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", leader.ready), s.procs...)
	everywhere("127.0.0.2 up, 127.0.0.3 down, with the old leader back", "127.0.0.2")

	// The health records are the store's: not in a transfer, not asked.
	var zone string
	if code, err := members[0].client().Do("GET", "/v1/zones/pol.test.", nil, &zone); err != nil || code != http.StatusOK {
		t.Fatalf("GET zone: %d %v", code, err)
	}
	if !strings.Contains(zone, "TYPE65382") {
		t.Errorf("the zone's export: expected the health record, got\n%s", zone)
	}
}

func memberAddrs(ms []*shardMember) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.addr())
	}
	return out
}
