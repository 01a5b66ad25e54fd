package integration

import (
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
)

// statefulSet runs members from one Corefile, as a Kubernetes StatefulSet
// does: each gets its pod name (POD_NAME, craftdns-a-N, whose ordinal
// makes its id) and its ports in its environment.
type statefulSet struct {
	t     *testing.T
	wd    string
	raft  []int // per ordinal, for as many as the test may start
	api   []int
	dns   []int
	ready []int
	pods  map[int]*harness.Proc
	token string
	k8s   *fakeKubernetes
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
        statefulset craftdns-a {$SA_DIR}
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
	s.k8s = startFakeKubernetes(t, "craftdns-a", 3)
	return s
}

// start starts the pod of ordinal i with token (the group's when "").
func (s *statefulSet) start(i int, token string) *harness.Proc {
	if token == "" {
		token = s.token
	}
	p := harness.StartEnv(s.t, fmt.Sprintf("craftdns-a-%d", i), s.wd, "member.Corefile",
		fmt.Sprintf("POD_NAME=craftdns-a-%d", i), fmt.Sprintf("DNS_PORT=%d", s.dns[i]), fmt.Sprintf("RAFT_PORT=%d", s.raft[i]),
		fmt.Sprintf("API_PORT=%d", s.api[i]), fmt.Sprintf("READY_PORT=%d", s.ready[i]), "TOKEN="+token,
		"SA_DIR="+s.k8s.account, "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT="+s.k8s.port)
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
// Raft address, with " learner" after a learner's.
func (s *statefulSet) members(i int) map[uint64]string {
	var out struct {
		Members []struct {
			ID      uint64 `json:"id"`
			Raft    string `json:"raft"`
			Learner bool   `json:"learner"`
		} `json:"members"`
	}
	if code, err := s.client(i).Do("GET", "/v1/cluster", nil, &out); err != nil || code != http.StatusOK {
		s.t.Fatalf("GET /v1/cluster on ordinal %d: %d %v", i, code, err)
	}
	m := map[uint64]string{}
	for _, x := range out.Members {
		m[x.ID] = x.Raft
		if x.Learner {
			m[x.ID] += " learner"
		}
	}
	return m
}

// fakeKubernetes answers a pod's GET of its StatefulSet, as the
// Kubernetes API does, with the replicas the test sets; account is a
// service account directory (token, ca.crt, namespace) for it.
type fakeKubernetes struct {
	replicas atomic.Int64
	account  string
	port     string
	gets     atomic.Int64
}

func startFakeKubernetes(t *testing.T, name string, replicas int64) *fakeKubernetes {
	k := &fakeKubernetes{account: t.TempDir()}
	k.replicas.Store(replicas)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sa-token" {
			http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != "/apis/apps/v1/namespaces/craftdns/statefulsets/"+name {
			http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
			return
		}
		k.gets.Add(1)
		fmt.Fprintf(w, `{"kind":"StatefulSet","apiVersion":"apps/v1","metadata":{"name":%q,"namespace":"craftdns"},"spec":{"replicas":%d,"serviceName":%q}}`, name, k.replicas.Load(), name)
	}))
	t.Cleanup(srv.Close)
	_, k.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for f, data := range map[string][]byte{"token": []byte("sa-token\n"), "namespace": []byte("craftdns"), "ca.crt": ca} {
		if err := os.WriteFile(filepath.Join(k.account, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// TestJoinByOrdinal: one Corefile for every member, as a StatefulSet's
// ConfigMap gives it: ordinals 0-2 are members 1-3 and start the group;
// ordinal 3, started later (a scale-up), adds itself as member 4 through
// the members' API (a learner, promoted once it caught up), and answers
// writes made before and after; restarted, it asks nothing (its data says
// it is a member). Stopped while the StatefulSet (a fake Kubernetes API)
// no longer counts it, it leaves the majority; back, it votes again. A
// member with a wrong token does not start, says why, and the group is
// unchanged.
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

	s.k8s.replicas.Store(4) // scaled up
	p3 := s.start(3, "")
	s.waitReady(3)
	harness.Eventually(t, "member 4 a voter once caught up", 20*time.Second, func() bool {
		m := s.members(0)
		return len(m) == 4 && m[4] == fmt.Sprintf("127.0.0.1:%d", s.raft[3])
	})
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

	// Scale-down: the StatefulSet's replicas no longer count ordinal 3;
	// its member, stopped, leaves the majority (a learner), so the three
	// voters commit with one of them killed too. A stop while the replicas
	// count it (a restart) changes nothing.
	p3.Signal(syscall.SIGTERM)
	if code, err := p3.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("member 4 stopping for a restart: exit %d %v", code, err)
	}
	if m := s.members(0); m[4] != fmt.Sprintf("127.0.0.1:%d", s.raft[3]) {
		t.Fatalf("a restart changed member 4: %v", m)
	}
	p3.Restart()
	s.waitReady(3)
	s.k8s.replicas.Store(3)
	p3.Signal(syscall.SIGTERM)
	if code, err := p3.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("member 4 stopping for a scale-down: exit %d %v", code, err)
	}
	if m := s.members(0); !strings.HasSuffix(m[4], " learner") || len(m) != 4 {
		t.Fatalf("expected member 4 a learner after the scale-down, got %v\n%s", m, p3.Logs())
	}
	if !strings.Contains(p3.Logs(), "left the majority") {
		t.Errorf("expected member 4 to log why it left the majority:\n%s", p3.Logs())
	}
	s.pods[2].Kill()
	// Member 3 may have led: the write waits for the election among 1 and
	// 2 (with member 4 still a voter, two of four would never commit).
	harness.Eventually(t, "a write with member 4 scaled away and member 3 killed", 30*time.Second, func() bool {
		code, err := s.client(0).Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": []string{"scaled 300 IN A 192.0.2.3"}}, nil)
		return err == nil && code == http.StatusOK
	})
	s.pods[2].Restart()
	s.waitReady(2)

	// Scaled up again: the pod comes back with its data, catches up and
	// votes again.
	s.k8s.replicas.Store(4)
	p3.Restart()
	s.waitReady(3)
	harness.Eventually(t, "member 4 a voter again", 20*time.Second, func() bool { return s.members(0)[4] == fmt.Sprintf("127.0.0.1:%d", s.raft[3]) })
	harness.Eventually(t, "member 4 answering the write made while it was away", 20*time.Second, func() bool {
		return harness.HasA(s.addr(3), "scaled."+origin, "192.0.2.3")
	})
	if n := s.k8s.gets.Load(); n < 2 {
		t.Errorf("expected the members to ask the Kubernetes API at their stops, %d asked", n)
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
