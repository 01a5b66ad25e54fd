package integration

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/certs"

	"github.com/miekg/dns"
)

// tlsStatus is what a member's /v1/cluster says of the group.
type tlsStatus struct {
	Leader  uint64
	Term    uint64
	Members []struct{ ID uint64 }
}

func tlsAPI(i int) harness.API { return harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", 8280+i)} }

func tlsCluster(t *testing.T, i int) tlsStatus {
	t.Helper()
	var st tlsStatus
	if code, err := tlsAPI(i).Do("GET", "/v1/cluster", nil, &st); err != nil || code != http.StatusOK {
		t.Fatalf("member %d's cluster status: %d %v", i, code, err)
	}
	return st
}

// TestTLSExample runs Corefile.examples/tls/ (make run-tls): three members
// whose Raft transport is mutual TLS with the example's certificates, and
// the router that asks them over DNS over TLS (routerOverTLS). They
// elect a leader and replicate writes; two intruders, one with a
// certificate from another CA (and trusting both CAs), one without TLS,
// each posing as a member of the group and campaigning for its
// leadership, can neither join nor disturb it (the group's term and
// leader stay, the intruders never learn a leader). A member started with
// TLS files that are missing or do not match exits with an error naming
// them and writes nothing; a reload reads new certificates.
func TestTLSExample(t *testing.T) {
	wd := harness.Workdir(t)
	var procs []*harness.Proc
	for i := 1; i <= 3; i++ {
		procs = append(procs, harness.Start(t, fmt.Sprintf("m%d", i), wd, fmt.Sprintf("Corefile.examples/tls/member%d.Corefile", i)))
	}
	for i := 1; i <= 3; i++ {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", 8290+i), procs...)
	}
	write := func(via int, name string) {
		t.Helper()
		code, err := tlsAPI(via).Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.7"}}, nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("write %s through member %d: %d %v", name, via, code, err)
		}
		for i := 1; i <= 3; i++ {
			harness.Eventually(t, fmt.Sprintf("%s on member %d", name, i), 20*time.Second, func() bool {
				return harness.HasA(fmt.Sprintf("127.0.0.1:%d", 1080+i), name, "192.0.2.7")
			})
		}
	}
	write(2, "tls1.example.org.")
	routerOverTLS(t, wd, procs)

	// The Raft port speaks TLS only: the plain protocol gets no reply.
	c, err := net.Dial("tcp", "127.0.0.1:7081")
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("CRFT\x02\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x0ccraftdns-tls"))
	var reply [1]byte
	if n, err := c.Read(reply[:]); err == nil && n == 1 && reply[0] == 0 {
		t.Error("the TLS Raft port accepted a plain handshake")
	}
	c.Close()

	// Intruders: member 2 of the group by their Corefiles, in a group of
	// their own making, campaigning at members 1 and 3.
	certDir := filepath.Join(wd, "intruder-certs")
	os.MkdirAll(certDir, 0o755)
	other, err := certs.NewAuthority("another CA", time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := other.WriteMember(certDir, "intruder", 1)
	if err != nil {
		t.Fatal(err)
	}
	exampleCA, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/tls/certs/ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(certDir, "both.pem")
	if err := os.WriteFile(both, append(exampleCA, other.PEM...), 0o644); err != nil {
		t.Fatal(err)
	}
	before := tlsCluster(t, 1)
	var intruders []*harness.Proc
	var intruderReady []string
	for n, tlsLine := range []string{fmt.Sprintf("raft_tls %s %s %s", cert, key, both), ""} {
		dnsPort, raftPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
		corefile := fmt.Sprintf(`example.org:%d {
    bind 127.0.0.1
    craftstore {
        id 2
        cluster craftdns-tls
        data data/intruder%d
        peer 1 127.0.0.1:7081
        peer 2 127.0.0.1:%d
        peer 3 127.0.0.1:7083
        %s
    }
    ready 127.0.0.1:%d {
        monitor continuously
    }
}
`, dnsPort, n, raftPort, tlsLine, readyPort)
		name := fmt.Sprintf("intruder%d", n)
		if err := os.WriteFile(filepath.Join(wd, name+".Corefile"), []byte(corefile), 0o644); err != nil {
			t.Fatal(err)
		}
		intruders = append(intruders, harness.Start(t, name, wd, name+".Corefile"))
		intruderReady = append(intruderReady, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort))
	}
	// Elections take 1-2s; give the intruders several.
	time.Sleep(5 * time.Second)
	write(3, "tls2.example.org.")
	after := tlsCluster(t, 1)
	if after.Term != before.Term || after.Leader != before.Leader || len(after.Members) != 3 {
		t.Errorf("the intruders disturbed the group: term %d leader %d before, term %d leader %d and %d members after",
			before.Term, before.Leader, after.Term, after.Leader, len(after.Members))
	}
	for n, url := range intruderReady {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("intruder %d is ready: it found a leader", n)
			}
		}
		// The member logs each leader it learns ("member 2: member L is
		// the leader of term T"); it may only ever be itself.
		if logs := intruders[n].Logs(); strings.Contains(logs, " is the leader of term") && !strings.Contains(logs, "member 2: member 2 is the leader") {
			t.Errorf("intruder %d learned the group's leader:\n%s", n, logs)
		}
	}
	refused := 0
	for _, p := range []*harness.Proc{procs[0], procs[2]} {
		for line := range strings.Lines(p.Logs()) {
			if strings.Contains(line, "refused peer connection") {
				if refused == 0 {
					t.Logf("%s: %s", p.Name, strings.TrimSpace(line))
				}
				refused++
			}
		}
	}
	if refused == 0 {
		t.Error("members 1 and 3 logged no refused peer connection")
	}
	for _, p := range intruders {
		for line := range strings.Lines(p.Logs()) {
			if strings.Contains(line, "peer 1:") {
				t.Logf("%s: %s", p.Name, strings.TrimSpace(line))
				break
			}
		}
	}
	for _, p := range intruders {
		p.Kill()
	}

	// Bad TLS files: an error that names them, and no data directory.
	m1, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/tls/member1.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	exampleLine := "raft_tls Corefile.examples/tls/certs/member1.pem Corefile.examples/tls/certs/member1-key.pem Corefile.examples/tls/certs/ca.pem"
	if !strings.Contains(string(m1), exampleLine) {
		t.Fatalf("member1.Corefile has no line %q", exampleLine)
	}
	for n, tc := range []struct{ line, want string }{
		{"raft_tls Corefile.examples/tls/certs/member1.pem Corefile.examples/tls/certs/missing-key.pem Corefile.examples/tls/certs/ca.pem", "missing-key.pem"},
		{"raft_tls Corefile.examples/tls/certs/member1.pem Corefile.examples/tls/certs/member2-key.pem Corefile.examples/tls/certs/ca.pem", "private key does not match"},
		{fmt.Sprintf("raft_tls %s %s Corefile.examples/tls/certs/ca.pem", cert, key), "certificate signed by unknown authority"},
	} {
		text := strings.Replace(string(m1), exampleLine, tc.line, 1)
		text = strings.Replace(text, "data data/tls/m1", fmt.Sprintf("data data/bad%d", n), 1)
		text = strings.Replace(text, "example.org:1081", fmt.Sprintf("example.org:%d", harness.ListenPort(t)), 1)
		name := fmt.Sprintf("bad%d", n)
		os.WriteFile(filepath.Join(wd, name+".Corefile"), []byte(text), 0o644)
		p := harness.Start(t, name, wd, name+".Corefile")
		code, err := p.Wait(20 * time.Second)
		if err != nil || code == 0 {
			t.Errorf("%s: expected the start to fail, got exit %d, %v", name, code, err)
		}
		if logs := p.Logs(); !strings.Contains(logs, "raft_tls") || !strings.Contains(logs, tc.want) {
			t.Errorf("%s: expected an error naming raft_tls and %q, got:\n%s", name, tc.want, logs)
		}
		if _, err := os.Stat(filepath.Join(wd, "data", name)); !os.IsNotExist(err) {
			t.Errorf("%s: the failed start left its data directory (%v)", name, err)
		}
	}

	// Reload: member 1 runs with a certificate of its own from the
	// example's CA; a new one is read on SIGUSR1, and it keeps working.
	ca, err := certs.LoadAuthority(filepath.Join(harness.Repo, "Corefile.examples/tls/certs/ca.pem"),
		filepath.Join(harness.Repo, "Corefile.examples/tls/certs/ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	m1Dir := filepath.Join(wd, "m1-certs")
	os.MkdirAll(m1Dir, 0o755)
	m1Cert, m1Key, err := ca.WriteMember(m1Dir, "member1", 1)
	if err != nil {
		t.Fatal(err)
	}
	own := strings.Replace(string(m1), exampleLine, fmt.Sprintf("raft_tls %s %s Corefile.examples/tls/certs/ca.pem", m1Cert, m1Key), 1)
	os.WriteFile(filepath.Join(wd, "m1-own.Corefile"), []byte(own), 0o644)
	procs[0].Signal(syscall.SIGTERM)
	if code, err := procs[0].Wait(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("member 1 after SIGTERM: exit %d, %v", code, err)
	}
	p1 := harness.Start(t, "m1-own", wd, "m1-own.Corefile")
	harness.WaitReady(t, "http://127.0.0.1:8291/ready", p1)
	write(1, "tls3.example.org.")
	if _, _, err := ca.WriteMember(m1Dir, "member1", 1); err != nil {
		t.Fatal(err)
	}
	p1.Signal(syscall.SIGUSR1)
	harness.Eventually(t, "member 1 reading its new certificate", 20*time.Second, func() bool {
		return strings.Contains(p1.Logs(), "raft_tls certificates changed")
	})
	write(1, "tls4.example.org.")
	write(3, "tls5.example.org.")
}

// routerOverTLS runs the example's router (router.Corefile), which asks the
// members over DNS over TLS with a client certificate from the group's CA:
// its answers (positive, NXDOMAIN, a long TXT RRset, a name just written)
// equal a member's own, relayed on the fast path too, and every request
// went to a tls:// address; with one member stopped the others answer. A
// router whose certificate is from another CA, and one that trusts only
// the system's CAs, get no answer from the members (SERVFAIL): the
// members' TLS port takes only the group's routers, and a router takes
// only the group's members.
func routerOverTLS(t *testing.T, wd string, members []*harness.Proc) {
	t.Helper()
	rp := harness.Start(t, "router", wd, "Corefile.examples/tls/router.Corefile")
	harness.WaitReady(t, "http://127.0.0.1:8294/ready", rp)
	r := &router{name: "router", dns: 1084, metrics: 9184, p: rp}
	long := make([]string, 40)
	for i := range long {
		long[i] = fmt.Sprintf(`long.example.org. 60 IN TXT "%s %02d"`, strings.Repeat("x", 90), i)
	}
	if code, err := tlsAPI(1).Do("POST", "/v1/zones/example.org/records", map[string]any{"add": long}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("write long.example.org: %d %v", code, err)
	}
	same := func(name string, qtype uint16, tcp bool) {
		t.Helper()
		var got, want *dns.Msg
		harness.Eventually(t, fmt.Sprintf("%s %s through the router like member 1", name, dns.TypeToString[qtype]), 20*time.Second, func() bool {
			q := new(dns.Msg)
			q.SetQuestion(name, qtype)
			q.SetEdns0(1232, false)
			c := &dns.Client{Timeout: 5 * time.Second}
			if tcp {
				c.Net = "tcp"
			}
			var err error
			if got, _, err = c.Exchange(q, r.addr()); err != nil {
				return false
			}
			if want, _, err = c.Exchange(q, "127.0.0.1:1081"); err != nil {
				return false
			}
			got.Id, want.Id = 0, 0
			return got.String() == want.String()
		})
		if got.Rcode == dns.RcodeServerFailure {
			t.Errorf("%s: SERVFAIL from both", name)
		}
	}
	same("www.example.org.", dns.TypeA, false)
	same("missing.example.org.", dns.TypeA, false)
	same("example.org.", dns.TypeNS, false)
	same("long.example.org.", dns.TypeTXT, false) // truncated for UDP
	same("long.example.org.", dns.TypeTXT, true)
	same("tls1.example.org.", dns.TypeA, true)
	m := routerMetrics(t, r)
	if n := metricSum(t, m, "coredns_craftroute_fast_relayed_total"); n == 0 {
		t.Error("no answer relayed on the fast path over TLS")
	}
	if plain, all := metricSum(t, m, "coredns_craftroute_requests_total", `member="127.0.0.1`),
		metricSum(t, m, "coredns_craftroute_requests_total"); plain != 0 || all == 0 {
		t.Errorf("requests to members: %v in all, %v not over TLS", all, plain)
	}

	// One member stopped: the others answer.
	members[0].Signal(syscall.SIGSTOP)
	for i := 0; i < 20; i++ {
		if !harness.HasA(r.addr(), "www.example.org.", "192.0.2.10") {
			t.Errorf("query %d with member 1 stopped: no answer through the router", i)
			break
		}
	}
	members[0].Signal(syscall.SIGCONT)

	// Routers the members do not know, and that do not know them.
	certDir := filepath.Join(wd, "router-certs")
	os.MkdirAll(certDir, 0o755)
	other, err := certs.NewAuthority("another CA", time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := other.WriteMember(certDir, "stranger", 1)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := other.WriteCA(certDir, "other-ca")
	if err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(certDir, "both.pem")
	exampleCA, _ := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/tls/certs/ca.pem"))
	otherPEM, _ := os.ReadFile(otherCA)
	os.WriteFile(both, append(exampleCA, otherPEM...), 0o644)
	text, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/tls/router.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	tlsLine := "tls Corefile.examples/tls/certs/router.pem Corefile.examples/tls/certs/router-key.pem Corefile.examples/tls/certs/ca.pem"
	if !strings.Contains(string(text), tlsLine) {
		t.Fatalf("router.Corefile has no line %q", tlsLine)
	}
	for n, line := range []string{
		fmt.Sprintf("tls %s %s %s", cert, key, both), // a certificate the members refuse
		"tls " + otherCA, // no certificate, and members it cannot verify
		"",               // the system's CAs, which did not sign the members'
	} {
		dnsPort, readyPort := harness.ListenPort(t), harness.ListenPort(t)
		c := strings.Replace(string(text), tlsLine, line, 1)
		c = strings.Replace(c, "example.org:1084", fmt.Sprintf("example.org:%d", dnsPort), 1)
		c = strings.Replace(c, "127.0.0.1:8294", fmt.Sprintf("127.0.0.1:%d", readyPort), 1)
		c = strings.Replace(c, "    prometheus 127.0.0.1:9184\n", "", 1)
		name := fmt.Sprintf("stranger%d", n)
		os.WriteFile(filepath.Join(wd, name+".Corefile"), []byte(c), 0o644)
		sp := harness.Start(t, name, wd, name+".Corefile")
		// It never becomes ready (no member answers its probes).
		var resp *dns.Msg
		harness.Eventually(t, name+" answering", 20*time.Second, func() bool {
			resp, err = harness.Query(fmt.Sprintf("127.0.0.1:%d", dnsPort), "www.example.org.", dns.TypeA)
			return err == nil
		})
		if resp.Rcode != dns.RcodeServerFailure || len(resp.Answer) != 0 {
			t.Errorf("%s: expected SERVFAIL without an answer, got %s", name, resp)
		}
		if ready, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort)); err == nil {
			ready.Body.Close()
			if ready.StatusCode == http.StatusOK {
				t.Errorf("%s is ready", name)
			}
		}
		if logs := sp.Logs(); n > 0 && (!strings.Contains(logs, "member tls://127.0.0.1:853") || !strings.Contains(logs, "certificate signed by unknown authority")) {
			t.Errorf("%s: expected a log line naming a member and the certificate it refused, got:\n%s", name, logs)
		}
		sp.Kill()
	}
	rp.Kill()
}
