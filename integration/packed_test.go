package integration

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// TestPackedAnswersThroughPlugins checks the packed answers (craftstore's
// rawwrite.go) with the plugins before craftstore that care how a reply is
// written: prometheus counts their rcodes, rewrite reverts the name it
// rewrote, and a TSIG-signed query gets a signed reply.
func TestPackedAnswersThroughPlugins(t *testing.T) {
	wd := harness.Workdir(t)
	dnsPort, apiPort, readyPort, metricsPort, raftPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
	corefile := fmt.Sprintf(`example.org:%d {
    bind 127.0.0.1
    prometheus 127.0.0.1:%d
    errors
    tsig {
        secret %s %s
    }
    rewrite name exact alias.example.org. www.example.org.
    craftstore {
        data data
        raft 127.0.0.1:%d
        seed example.org Corefile.examples/zones/example.org.zone
        api 127.0.0.1:%d
    }
    ready 127.0.0.1:%d
}
`, dnsPort, metricsPort, harness.ACMEKey, harness.ACMESecret, raftPort, apiPort, readyPort)
	if err := os.WriteFile(filepath.Join(wd, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	p := harness.Start(t, "member", wd, "Corefile")
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), p)
	addr := fmt.Sprintf("127.0.0.1:%d", dnsPort)
	harness.Eventually(t, "the seeded zone", 20*time.Second, func() bool { return harness.HasA(addr, "www.example.org", "192.0.2.10") })

	responses := func() map[string]int {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		counts := map[string]int{}
		re := regexp.MustCompile(`(?m)^coredns_dns_responses_total\{(.*)\} (\d+)$`)
		for _, m := range re.FindAllStringSubmatch(string(body), -1) {
			n, _ := strconv.Atoi(m[2])
			// The plugin label is the plugin after prometheus (errors):
			// the chain tells prometheus's recorder only of that one.
			if rc := regexp.MustCompile(`rcode="([A-Z]+)"`).FindStringSubmatch(m[1]); rc != nil {
				counts[rc[1]] += n
			}
		}
		return counts
	}
	// The seeded-zone wait's last query (NOERROR) can be counted after
	// its reply reached us: start from counts that include it, and that
	// hold still for a moment, so no query before this point lands in
	// the difference below.
	var before map[string]int
	for deadline := time.Now().Add(5 * time.Second); ; {
		before = responses()
		time.Sleep(100 * time.Millisecond)
		again := responses()
		if before["NOERROR"] >= 1 && maps.Equal(before, again) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus counts did not settle before the queries: %v, then %v", before, again)
		}
	}

	// Answers the packed path serves: NOERROR with data, NODATA, NXDOMAIN.
	const n = 5
	for i := 0; i < n; i++ {
		for _, q := range []struct {
			name  string
			qtype uint16
			rcode int
			ans   int
		}{
			{"www.example.org.", dns.TypeA, dns.RcodeSuccess, 1},
			{"www.example.org.", dns.TypeTXT, dns.RcodeSuccess, 0},
			{fmt.Sprintf("nx%d.example.org.", i), dns.TypeA, dns.RcodeNameError, 0},
		} {
			r, err := harness.Query(addr, q.name, q.qtype)
			if err != nil {
				t.Fatal(err)
			}
			if r.Rcode != q.rcode || len(r.Answer) != q.ans || !r.Authoritative || len(r.Ns) == 0 {
				t.Fatalf("%s %s: expected rcode %s with %d answers, authoritative, got\n%s", q.name, dns.TypeToString[q.qtype], dns.RcodeToString[q.rcode], q.ans, r)
			}
		}
	}
	// prometheus counts a response after it is written: the client can
	// read the last one before the server has counted it. Wait for the
	// counts to reach the number of responses (bounded), then they must
	// be exactly that.
	want := map[string]int{"NOERROR": 2 * n, "NXDOMAIN": n}
	var after map[string]int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		after = responses()
		if after["NOERROR"]-before["NOERROR"] >= want["NOERROR"] && after["NXDOMAIN"]-before["NXDOMAIN"] >= want["NXDOMAIN"] || time.Now().After(deadline) {
			break
		}
	}
	for key, want := range want {
		if got := after[key] - before[key]; got != want {
			t.Errorf("prometheus counted %d responses %s, expected %d (before %v, after %v)", got, key, want, before, after)
		}
	}

	// rewrite's reply carries the name the client asked for.
	r, err := harness.Query(addr, "alias.example.org.", dns.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Answer) != 1 || r.Answer[0].Header().Name != "alias.example.org." {
		t.Errorf("expected rewrite's answer owned by alias.example.org., got\n%s", r)
	}

	// A signed query gets a signed reply.
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	m.SetTsig(harness.ACMEKey, dns.HmacSHA256, 300, time.Now().Unix())
	c := &dns.Client{Timeout: 2 * time.Second, TsigSecret: map[string]string{harness.ACMEKey: harness.ACMESecret}}
	r, _, err = c.Exchange(m, addr)
	if err != nil {
		t.Fatal(err)
	}
	if r.IsTsig() == nil || len(r.Answer) != 1 {
		t.Errorf("expected a signed answer to a signed query, got\n%s", r)
	}
}
