package integration

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// The APIs' limits and the member's imports, through the binary (issue
// 47): a request by a name that is not the API's (DNS rebinding) is
// refused, $GENERATE and AXFR-import bombs are refused before the member's
// memory grows, and `seed ZONE axfr` and `fallthrough` work as the README
// says.

const limitsZone = `$ORIGIN limits.example.
$TTL 300
@ SOA ns1 hostmaster 1 7200 3600 1209600 60
@ NS ns1
ns1 A 192.0.2.53
www A 192.0.2.10
`

// startMember starts one craftstore member of the block "zones" with the
// craftstore properties extra (and plugins after it, after), waits until
// it is ready, and returns its process, DNS address and API.
func startMember(t *testing.T, wd, name, zones, extra, after string) (*harness.Proc, string, harness.API) {
	t.Helper()
	p, addr, api, ready := startMemberNoWait(t, wd, name, zones, extra, after)
	harness.WaitReady(t, ready, p)
	return p, addr, api
}

// startMemberNoWait is startMember that does not wait, and also returns
// the member's ready URL.
func startMemberNoWait(t *testing.T, wd, name, zones, extra, after string) (*harness.Proc, string, harness.API, string) {
	t.Helper()
	dnsPort, apiPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
	corefile := fmt.Sprintf(`%s:%d {
    bind 127.0.0.1
    craftstore {
        data data/%s
        api 127.0.0.1:%d
%s    }
%s    ready 127.0.0.1:%d
    errors
}
`, zones, dnsPort, name, apiPort, extra, after, readyPort)
	writeFile(t, filepath.Join(wd, name+".Corefile"), corefile)
	p := harness.Start(t, name, wd, name+".Corefile")
	return p, fmt.Sprintf("127.0.0.1:%d", dnsPort), harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)},
		fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort)
}

// hostRequest sends GET path to base with Host host and returns the status
// and the body.
func hostRequest(t *testing.T, base, path, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, b.String()
}

// TestAPIRebinding: a member's and a router's API without a token (on
// loopback) refuse a request by another name than their own (a page whose
// name resolves to 127.0.0.1) with 421 and a JSON error, and take it by
// address or localhost.
func TestAPIRebinding(t *testing.T) {
	wd := harness.Workdir(t)
	_, _, member := startMember(t, wd, "rebind", "limits.example", "", "")
	s := startSharded(t, wd, 1, 1, []string{"limits.example."}, routerSpec{zones: []string{"limits.example."}, key: "name"})
	for _, base := range []string{member.Base, s.routers[0].client().Base} {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
		code, body := hostRequest(t, base, "/v1/zones", "attacker.example:"+port)
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, `"error"`) {
			t.Errorf("%s with Host attacker.example: expected 421 with a JSON error, got %d %s", base, code, body)
		}
		for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port} {
			if code, body := hostRequest(t, base, "/v1/zones", host); code != http.StatusOK {
				t.Errorf("%s with Host %s: expected 200, got %d %s", base, host, code, body)
			}
		}
	}
	// Nothing written by the refused writes either.
	req, _ := http.NewRequest("PUT", member.Base+"/v1/zones/limits.example", strings.NewReader(limitsZone))
	req.Host = "attacker.example"
	req.Header.Set("Content-Type", "text/dns")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a PUT by another name: expected 421, got %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	var zones []map[string]any
	if code, err := member.Do("GET", "/v1/zones", nil, &zones); err != nil || code != 200 || len(zones) != 0 {
		t.Errorf("expected no zone after the refused PUT, got %d %v %v", code, zones, err)
	}
}

// TestImportBombs: a zone file of $GENERATE lines that make 150 x 65,536
// records and an AXFR import that never ends are refused (413) at
// max_zone_records, before the member's memory grows: its RSS stays within
// a bound far below what the records would take, and nothing is written.
func TestImportBombs(t *testing.T) {
	wd := harness.Workdir(t)
	const max = 50000
	p, addr, api := startMember(t, wd, "bombs", "limits.example", fmt.Sprintf("        max_zone_records %d\n", max), "")
	putZone(t, api, "limits.example.", limitsZone)
	before := p.RSS(t)

	bomb := limitsZone + strings.Repeat("$GENERATE 0-65535 host-$ 300 IN A 192.0.2.2\n", 150)
	var out map[string]any
	code, err := api.Do("PUT", "/v1/zones/limits.example", bomb, &out)
	if err != nil || code != http.StatusRequestEntityTooLarge || !strings.Contains(fmt.Sprint(out["error"]), "max_zone_records") {
		t.Errorf("the $GENERATE bomb (%d bytes): expected 413 naming max_zone_records, got %d %v %v", len(bomb), code, out, err)
	}

	// A primary that sends records without end, until the member hangs up
	// (bounded: twenty times the limit).
	soa := dnsdiff.ParseZone(t, "limits.example.", limitsZone)[0]
	primary, sent := dnsdiff.StartEndlessPrimary(t, soa, 20*max, func(i int) string {
		return fmt.Sprintf("h%d.limits.example. 300 IN TXT \"%0200d\"", i, i)
	})
	code, err = api.Do("POST", "/v1/zones/limits.example/axfr", map[string]string{"primary": primary}, &out)
	if err != nil || code != http.StatusRequestEntityTooLarge || !strings.Contains(fmt.Sprint(out["error"]), "max_zone_records") {
		t.Errorf("the endless AXFR: expected 413 naming max_zone_records, got %d %v %v", code, out, err)
	}
	if n := sent.Load(); n >= 20*max {
		t.Errorf("the member read the endless transfer to its end (%d records)", n)
	}

	after := p.RSS(t)
	// The bombs' records would take gigabytes (9.8 million A records) and
	// hundreds of megabytes (a million 200-byte TXT records); the member
	// may hold at most max of them, about 50 MB, at once.
	const bound = 192 << 20
	if after-before > bound {
		t.Errorf("the member's RSS grew by %d MiB (from %d to %d MiB), more than %d MiB", (after-before)>>20, before>>20, after>>20, bound>>20)
	}
	t.Logf("RSS %d MiB before the bombs, %d MiB after; the primary had sent %d records when the member hung up (limit %d)",
		before>>20, after>>20, sent.Load(), max)
	m, err := harness.Query(addr, "limits.example.", dns.TypeSOA)
	if err != nil || len(m.Answer) != 1 || m.Answer[0].(*dns.SOA).Serial != 1 {
		t.Errorf("expected the zone as it was (serial 1), got %v %v", m, err)
	}
}

// TestSeedAXFR: `seed ZONE axfr ADDRESS` imports the zone from a real
// primary (NSD) into a new group, retrying every second while the primary
// does not answer: the member starts first, the primary a few seconds
// later.
func TestSeedAXFR(t *testing.T) {
	wd := harness.Workdir(t)
	port := dnsdiff.FreePort(t)
	primary := fmt.Sprintf("127.0.0.1:%d", port)
	// The member is not ready before its seeds are imported.
	p, addr, api, ready := startMemberNoWait(t, wd, "seedaxfr", "limits.example", "        seed limits.example axfr "+primary+"\n", "")
	harness.Eventually(t, "the member's API", 10*time.Second, func() bool {
		code, err := api.Do("GET", "/v1/zones", nil, nil)
		return err == nil && code == 200
	})
	time.Sleep(2 * time.Second) // a few failed transfers
	if m, err := harness.Query(addr, "www.limits.example.", dns.TypeA); err == nil && m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
		t.Fatalf("the zone is there before its primary is: %v", m)
	}
	dnsdiff.StartNSDPrimary(t, "limits.example.", limitsZone, port)
	harness.WaitReady(t, ready, p)
	harness.Eventually(t, "the seeded zone", 20*time.Second, func() bool {
		return harness.HasA(addr, "www.limits.example.", "192.0.2.10")
	})
	var zones []map[string]any
	if code, err := api.Do("GET", "/v1/zones", nil, &zones); err != nil || code != 200 || len(zones) != 1 || zones[0]["records"] != float64(4) {
		t.Errorf("expected the zone of 4 records, got %d %v %v", code, zones, err)
	}
	if logs := p.Logs(); !strings.Contains(logs, "limits.example") {
		t.Errorf("expected the seed in the log:\n%s", tail(logs, 2000))
	}
}

// TestFallthrough: with `fallthrough`, names in no stored zone go to the
// next plugin (here whoami); without it they are refused; with
// `fallthrough ZONES` only those zones' names go on.
func TestFallthrough(t *testing.T) {
	wd := harness.Workdir(t)
	_, all, api := startMember(t, wd, "fallall", ".", "        fallthrough\n", "    whoami\n")
	putZone(t, api, "limits.example.", limitsZone)
	_, some, api2 := startMember(t, wd, "fallsome", ".", "        fallthrough other.example\n", "    whoami\n")
	putZone(t, api2, "limits.example.", limitsZone)
	_, none, api3 := startMember(t, wd, "fallnone", ".", "", "    whoami\n")
	putZone(t, api3, "limits.example.", limitsZone)

	whoami := func(m *dns.Msg) bool { // whoami answers with the client's address and port
		for _, rr := range m.Extra {
			if rr.Header().Rrtype == dns.TypeSRV {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		addr, name string
		want       string // "zone", "whoami" or "refused"
	}{
		{all, "www.limits.example.", "zone"},
		{all, "www.other.example.", "whoami"},
		{all, "x.unrelated.test.", "whoami"},
		{some, "www.limits.example.", "zone"},
		{some, "www.other.example.", "whoami"},
		{some, "x.unrelated.test.", "refused"},
		{none, "www.other.example.", "refused"},
		{none, "www.limits.example.", "zone"},
	} {
		m, err := harness.Query(tc.addr, tc.name, dns.TypeA)
		if err != nil {
			t.Fatalf("%s at %s: %v", tc.name, tc.addr, err)
		}
		got := "other"
		switch {
		case m.Rcode == dns.RcodeRefused:
			got = "refused"
		case whoami(m):
			got = "whoami"
		case m.Authoritative && m.Rcode == dns.RcodeSuccess && len(m.Answer) == 1:
			got = "zone"
		}
		if got != tc.want {
			t.Errorf("%s at %s: expected %s, got %s: %v", tc.name, tc.addr, tc.want, got, m)
		}
	}
}
