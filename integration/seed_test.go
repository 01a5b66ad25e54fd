package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// TestSeedSurvivesKill: a member killed (SIGKILL) at any point of its first
// start, before, during or after the import of its seed zone, seeds the
// zone whole on the next start, and is ready only once the zone is served.
func TestSeedSurvivesKill(t *testing.T) {
	const origin = "seed.example."
	const hosts = 20000
	var zone strings.Builder
	fmt.Fprintf(&zone, "$ORIGIN %s\n$TTL 300\n@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ IN NS ns1\nns1 IN A 192.0.2.53\n", origin)
	for i := 0; i < hosts; i++ {
		fmt.Fprintf(&zone, "h%d IN A 198.51.100.%d\n", i, i%250+1)
	}
	for _, after := range []time.Duration{0, 150 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			wd := harness.Workdir(t)
			if err := os.WriteFile(filepath.Join(wd, "seed.zone"), []byte(zone.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			dnsPort, apiPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
			corefile := fmt.Sprintf(`%s:%d {
    bind 127.0.0.1
    craftstore {
        data data
        seed %s seed.zone
        api 127.0.0.1:%d
    }
    ready 127.0.0.1:%d {
        monitor continuously
    }
    errors
}
`, origin, dnsPort, origin, apiPort, readyPort)
			if err := os.WriteFile(filepath.Join(wd, "Corefile"), []byte(corefile), 0o644); err != nil {
				t.Fatal(err)
			}
			p := harness.Start(t, "member", wd, "Corefile")
			time.Sleep(after)
			p.Kill()
			p.Restart()
			harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), p)
			// Ready means served: no waiting beyond /ready.
			addr := fmt.Sprintf("127.0.0.1:%d", dnsPort)
			last := fmt.Sprintf("h%d.%s", hosts-1, origin)
			if !harness.HasA(addr, last, fmt.Sprintf("198.51.100.%d", (hosts-1)%250+1)) {
				r, err := harness.Query(addr, last, dns.TypeA)
				var zl string
				harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}.Do("GET", "/v1/zones", nil, &zl)
				t.Fatalf("expected %s served once ready after a kill %v into the first start, got %v %v; zones %s; log:\n%s", last, after, r, err, zl, tail(p.Logs(), 2000))
			}
			var zones []struct {
				Zone    string
				Records int
			}
			a := harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}
			if code, err := a.Do("GET", "/v1/zones", nil, &zones); err != nil || code != http.StatusOK || len(zones) != 1 {
				t.Fatalf("expected the seeded zone listed, got %d %v %+v", code, err, zones)
			}
			if want := hosts + 3; zones[0].Records != want {
				t.Errorf("expected %d records in the seeded zone, got %d", want, zones[0].Records)
			}
		})
	}
}
