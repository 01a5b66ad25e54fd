package integration

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
)

// statefulSet runs members from one Corefile, as a Kubernetes StatefulSet
// does: each gets its pod name (POD_NAME, craftdns-a-N, whose ordinal
// makes its id) and its ports in its environment.
type statefulSet struct {
	t      *testing.T
	wd     string
	raft   []int // per ordinal, for as many as the test may start
	api    []int
	dns    []int
	ready  []int
	pods   map[int]*harness.Proc
	token  string
	origin string
}

// statefulCorefile is the members' one Corefile: members 1-3 (ordinals
// 0-2) start the group, any other joins it through their APIs.
func (s *statefulSet) corefile() string {
	return fmt.Sprintf(`.:{$DNS_PORT} {
    bind 127.0.0.1
    craftstore {
        id ordinal {$POD_NAME}
        cluster craftdns-join
        data data/{$POD_NAME}
        raft 127.0.0.1:{$RAFT_PORT}
        peer 1 127.0.0.1:%d
        peer 2 127.0.0.1:%d
        peer 3 127.0.0.1:%d
        join http://127.0.0.1:%d http://127.0.0.1:%d http://127.0.0.1:%d
        api 127.0.0.1:{$API_PORT}
        token {$TOKEN}
    }
    ready 127.0.0.1:{$READY_PORT} {
        monitor continuously
    }
    errors
}
`, s.raft[0], s.raft[1], s.raft[2], s.api[0], s.api[1], s.api[2])
}

func newStatefulSet(t *testing.T, n int) *statefulSet {
	s := &statefulSet{t: t, wd: harness.Workdir(t), pods: map[int]*harness.Proc{}, token: "join-test-token"}
	for range n {
		s.raft = append(s.raft, harness.ListenPort(t))
		s.api = append(s.api, harness.ListenPort(t))
		s.dns = append(s.dns, harness.ListenPort(t))
		s.ready = append(s.ready, harness.ListenPort(t))
	}
	writeFile(t, filepath.Join(s.wd, "member.Corefile"), s.corefile())
	return s
}

// start starts the pod of ordinal i with token (the group's when "").
func (s *statefulSet) start(i int, token string) *harness.Proc {
	if token == "" {
		token = s.token
	}
	p := harness.StartEnv(s.t, fmt.Sprintf("craftdns-a-%d", i), s.wd, "member.Corefile",
		fmt.Sprintf("POD_NAME=craftdns-a-%d", i), fmt.Sprintf("DNS_PORT=%d", s.dns[i]), fmt.Sprintf("RAFT_PORT=%d", s.raft[i]),
		fmt.Sprintf("API_PORT=%d", s.api[i]), fmt.Sprintf("READY_PORT=%d", s.ready[i]), "TOKEN="+token)
	s.pods[i] = p
	return p
}

func (s *statefulSet) client(i int) harness.API {
	return harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", s.api[i]), Token: s.token}
}

func (s *statefulSet) addr(i int) string { return fmt.Sprintf("127.0.0.1:%d", s.dns[i]) }

func (s *statefulSet) waitReady(i int) {
	harness.WaitReady(s.t, fmt.Sprintf("http://127.0.0.1:%d/ready", s.ready[i]), s.pods[i])
}

// members returns the group's members as member i's API lists them: id →
// Raft address.
func (s *statefulSet) members(i int) map[uint64]string {
	var out struct {
		Members []struct {
			ID   uint64 `json:"id"`
			Raft string `json:"raft"`
		} `json:"members"`
	}
	if code, err := s.client(i).Do("GET", "/v1/cluster", nil, &out); err != nil || code != http.StatusOK {
		s.t.Fatalf("GET /v1/cluster on ordinal %d: %d %v", i, code, err)
	}
	m := map[uint64]string{}
	for _, x := range out.Members {
		m[x.ID] = x.Raft
	}
	return m
}

// TestJoinByOrdinal: one Corefile for every member, as a StatefulSet's
// ConfigMap gives it: ordinals 0-2 are members 1-3 and start the group;
// ordinal 3, started later (a scale-up), adds itself as member 4 through
// the members' API, catches up and answers writes made before and after;
// restarted, it asks nothing (its data says it is a member); a member
// with a wrong token does not start, says why, and the group is unchanged.
func TestJoinByOrdinal(t *testing.T) {
	const origin = "join.example."
	s := newStatefulSet(t, 5)
	for i := range 3 {
		s.start(i, "")
	}
	for i := range 3 {
		s.waitReady(i)
	}
	putZone(t, s.client(0), origin, fmt.Sprintf("$ORIGIN %s\n@ 300 IN SOA ns1 h 1 7200 3600 1209600 300\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.53\nbefore 300 IN A 192.0.2.1\n", origin))

	p3 := s.start(3, "")
	s.waitReady(3)
	if m := s.members(0); len(m) != 4 || m[4] != fmt.Sprintf("127.0.0.1:%d", s.raft[3]) {
		t.Fatalf("expected member 4 at 127.0.0.1:%d among 4 members, got %v", s.raft[3], m)
	}
	harness.Eventually(t, "member 4 answering the zone written before it joined", 20*time.Second, func() bool {
		return harness.HasA(s.addr(3), "before."+origin, "192.0.2.1")
	})
	if code, err := s.client(1).Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": []string{"after 300 IN A 192.0.2.2"}}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("write after the join: %d %v", code, err)
	}
	harness.Eventually(t, "member 4 answering a write made after it joined", 20*time.Second, func() bool {
		return harness.HasA(s.addr(3), "after."+origin, "192.0.2.2")
	})

	p3.Kill()
	p3.Restart()
	s.waitReady(3)
	if n := strings.Count(p3.Logs(), "joined the group"); n != 1 {
		t.Errorf("expected member 4 to join once, not again on its restart; it logged it %d times:\n%s", n, p3.Logs())
	}
	if m := s.members(2); len(m) != 4 {
		t.Errorf("expected 4 members after the restart, got %v", m)
	}

	bad := s.start(4, "wrong-token")
	code, err := bad.Wait(30 * time.Second)
	if err != nil || code == 0 || !strings.Contains(bad.Logs(), "401") {
		t.Errorf("a member with a wrong token: expected it to stop with an error saying 401, got exit %d %v:\n%s", code, err, bad.Logs())
	}
	if m := s.members(0); len(m) != 4 {
		t.Errorf("a refused join changed the group: %v", m)
	}
}
