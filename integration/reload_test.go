package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
)

// TestReloadAndMetrics reloads the Corefile (SIGUSR1) of a running member:
// the new instance must share the open bbolt file and Raft port instead of
// hanging on them, and keep serving and writing. It also reads the metrics.
func TestReloadAndMetrics(t *testing.T) {
	wd := harness.Workdir(t)
	dnsPort, apiPort, readyPort, metricsPort, raftPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
	corefile := fmt.Sprintf(`example.org:%d {
    bind 127.0.0.1
    craftstore {
        data data
        raft 127.0.0.1:%d
        seed example.org Corefile.examples/zones/example.org.zone
        api 127.0.0.1:%d
    }
    ready 127.0.0.1:%d
    prometheus 127.0.0.1:%d
    reload 2s 1s
}
`, dnsPort, raftPort, apiPort, readyPort, metricsPort)
	path := filepath.Join(wd, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	p := harness.Start(t, "member", wd, "Corefile")
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), p)
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", dnsPort)
	harness.Eventually(t, "the seeded zone", 20*time.Second, func() bool { return harness.HasA(dnsAddr, "www.example.org", "192.0.2.10") })
	a := harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}

	for i := 0; i < 2; i++ {
		if err := p.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, "the reload to complete", 20*time.Second, func() bool {
			return strings.Count(p.Logs(), "Reloading complete") > i
		})
		name := fmt.Sprintf("reload%d.example.org.", i)
		code, err := a.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.1"}}, nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("expected writes to work after reload %d, got %d %v\n%s", i, code, err, p.Logs())
		}
		if !harness.HasA(dnsAddr, name, "192.0.2.1") {
			t.Fatalf("expected DNS answers after reload %d", i)
		}
	}
	if strings.Contains(p.Logs(), "timeout") {
		t.Errorf("expected no lock timeouts on reload, log:\n%s", p.Logs())
	}

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{
		`coredns_craftstore_is_leader{member="1"} 1`,
		`coredns_craftstore_term{member="1"}`,
		`coredns_craftstore_applied_index{member="1"}`,
		`coredns_craftstore_proposals_total{member="1",result="applied"}`,
		`coredns_craftstore_apply_duration_seconds_count{member="1"}`,
		`coredns_craftstore_records{member="1",zone="example.org."}`,
	} {
		harness.Eventually(t, m, 5*time.Second, func() bool {
			if strings.Contains(string(body), m) {
				return true
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			return false
		})
	}
}
