package integration

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// TestSingleExample starts Corefile.examples/single.Corefile as `make run`
// does and uses it as the README's tour does.
func TestSingleExample(t *testing.T) {
	dig := harness.RequireTool(t, "dig")
	wd := harness.Workdir(t)
	p := harness.Start(t, "single", wd, "Corefile.examples/single.Corefile")
	harness.WaitReady(t, "http://127.0.0.1:8181/ready", p)
	harness.Eventually(t, "the seeded zone", 20*time.Second, func() bool { return harness.HasA("127.0.0.1:1053", "www.example.org", "192.0.2.10") })

	out, err := exec.Command(dig, "@127.0.0.1", "-p", "1053", "+norec", "www.example.org", "A").CombinedOutput()
	if err != nil {
		t.Fatalf("dig: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "status: NOERROR") || !strings.Contains(string(out), "flags: qr aa") ||
		!strings.Contains(string(out), "192.0.2.10") {
		t.Errorf("expected an authoritative answer with 192.0.2.10, got:\n%s", out)
	}

	a := harness.API{Base: "http://127.0.0.1:8053"}
	var res map[string]any
	code, err := a.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{"tour.example.org. 300 IN A 192.0.2.42"}}, &res)
	if err != nil || code != http.StatusOK {
		t.Fatalf("expected 200 adding a record, got %d %v %v", code, res, err)
	}
	if !harness.HasA("127.0.0.1:1053", "tour.example.org", "192.0.2.42") {
		t.Error("expected the added record in DNS once the API answered")
	}

	// Negative answers carry the SOA.
	r, err := harness.Query("127.0.0.1:1053", "nope.example.org", dns.TypeA)
	if err != nil || r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Errorf("expected NXDOMAIN with the SOA, got %v %v", r, err)
	}

	// Restart: the data directory is kept, the seed is not applied again.
	p.Kill()
	p.Restart()
	harness.WaitReady(t, "http://127.0.0.1:8181/ready", p)
	// ready answers once the member is, which can be a moment before the
	// DNS listener serves (a CI run asked in between and got no answer).
	keep := time.Now().Add(10 * time.Second)
	for !harness.HasA("127.0.0.1:1053", "tour.example.org", "192.0.2.42") {
		if time.Now().After(keep) {
			t.Fatalf("expected the record kept across a restart; log:\n%s", p.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterExample starts Corefile.examples/cluster/ as `make
// run-cluster` does, writes through one member, reads from all three, and
// kills members with SIGKILL while writing: every acknowledged write must
// end up on every member.
func TestClusterExample(t *testing.T) {
	wd := harness.Workdir(t)
	var procs []*harness.Proc
	for i := 1; i <= 3; i++ {
		procs = append(procs, harness.Start(t, fmt.Sprintf("member%d", i), wd, fmt.Sprintf("Corefile.examples/cluster/member%d.Corefile", i)))
	}
	for i := 1; i <= 3; i++ {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:819%d/ready", i), procs...)
	}
	dnsAddr := func(i int) string { return fmt.Sprintf("127.0.0.1:106%d", i) }
	apiOf := func(i int) harness.API { return harness.API{Base: fmt.Sprintf("http://127.0.0.1:806%d", i)} }
	for i := 1; i <= 3; i++ {
		harness.Eventually(t, fmt.Sprintf("the seeded zone on member %d", i), 20*time.Second, func() bool { return harness.HasA(dnsAddr(i), "www.example.org", "192.0.2.10") })
	}

	code, err := apiOf(2).Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{"via2.example.org. 60 IN A 198.51.100.2"}}, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("expected 200, got %d %v", code, err)
	}
	for i := 1; i <= 3; i++ {
		harness.Eventually(t, fmt.Sprintf("via2 on member %d", i), 10*time.Second, func() bool { return harness.HasA(dnsAddr(i), "via2.example.org", "198.51.100.2") })
	}

	leader := func() int {
		var st struct{ Leader uint64 }
		for i := 1; i <= 3; i++ {
			if code, err := apiOf(i).Do("GET", "/v1/cluster", nil, &st); err == nil && code == 200 && st.Leader != 0 {
				return int(st.Leader)
			}
		}
		return 0
	}

	// A writer spreads writes over the members and records what was acknowledged.
	var mu sync.Mutex
	acked := map[string]string{}
	down := map[int]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; n < 2000; n++ {
			select {
			case <-stop:
				return
			default:
			}
			m := n%3 + 1
			mu.Lock()
			skip := down[m]
			mu.Unlock()
			if skip {
				continue
			}
			name := fmt.Sprintf("w%d.example.org.", n)
			ip := fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
			code, err := apiOf(m).Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + " 60 IN A " + ip}}, nil)
			if err == nil && code == http.StatusOK {
				mu.Lock()
				acked[name] = ip
				mu.Unlock()
			}
		}
	}()

	kill := func(i int) {
		mu.Lock()
		down[i] = true
		mu.Unlock()
		procs[i-1].Kill()
	}
	revive := func(i int) {
		procs[i-1].Restart()
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:819%d/ready", i), procs...)
		mu.Lock()
		down[i] = false
		mu.Unlock()
	}
	time.Sleep(time.Second)
	l := leader()
	follower := l%3 + 1
	kill(follower)
	time.Sleep(2 * time.Second)
	revive(follower)
	time.Sleep(time.Second)
	l = leader()
	kill(l)
	time.Sleep(3 * time.Second)
	revive(l)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 20 {
		t.Fatalf("expected at least 20 acknowledged writes, got %d", len(acked))
	}
	for i := 1; i <= 3; i++ {
		for name, ip := range acked {
			harness.Eventually(t, fmt.Sprintf("%s on member %d", name, i), 20*time.Second, func() bool { return harness.HasA(dnsAddr(i), name, ip) })
		}
	}
	t.Logf("%d acknowledged writes present on all three members", len(acked))
}

// TestExamplePorts: the examples listen on ports that no other example
// uses, so that any two run side by side (make run, run-cluster, run-tls,
// run-sharded), and every member file of an example names its own.
func TestExamplePorts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(harness.Repo, "Corefile.examples", "*.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(harness.Repo, "Corefile.examples", "*", "*.Corefile"))
	files = append(files, more...)
	if len(files) < 4 {
		t.Fatalf("expected the examples' Corefiles, found %v", files)
	}
	// A port a file listens on: a server block's key, or the address of
	// bind-less listeners (api, ready, health, prometheus, raft). Peer
	// lines and shard lists name other members' ports.
	listen := regexp.MustCompile(`(?m)^(?:\S*:(\d+) \{|\s*(?:api|raft|health|prometheus|ready)\s+\S*:(\d+)|\s*peer (\d+) \S*:(\d+))`)
	owner := map[string]string{}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		id := ""
		if m := regexp.MustCompile(`(?m)^\s*id (\d+)`).FindSubmatch(text); m != nil {
			id = string(m[1])
		}
		rel, _ := filepath.Rel(harness.Repo, f)
		for _, m := range listen.FindAllStringSubmatch(string(text), -1) {
			port := m[1] + m[2]
			if m[3] != "" {
				if m[3] != id {
					continue // another member's Raft port
				}
				port = m[4]
			}
			if prev, ok := owner[port]; ok && prev != rel {
				t.Errorf("port %s is used by %s and %s", port, prev, rel)
			}
			owner[port] = rel
		}
	}
	t.Logf("%d ports over %d files", len(owner), len(files))
}
