package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// TestDifferentialNSD loads a generated zone full of hard cases into a real
// craftstore member through the API and into NSD from the same text, and
// compares their answers to a few thousand queries: a member that holds
// the records in memory, and one in paged mode (they read the bbolt file,
// a cache of 64 names in front), which is compared again after a restart.
func TestDifferentialNSD(t *testing.T) {
	const origin = "diff.example."
	for _, mode := range []string{"memory", "paged 64"} {
		for _, seed := range []int64{7, 42} {
			t.Run(fmt.Sprint(strings.Fields(mode)[0], "/seed", seed), func(t *testing.T) {
				text, queries := dnsdiff.GenerateZone(origin, seed, dnsdiff.DefaultNames)
				nsd := dnsdiff.StartNSD(t, origin, text)

				wd := t.TempDir()
				dnsPort, apiPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
				corefile := fmt.Sprintf(`%s:%d {
    bind 127.0.0.1
    craftstore {
        data data
        api 127.0.0.1:%d
        memory %s
    }
    ready 127.0.0.1:%d
}
`, origin, dnsPort, apiPort, mode, readyPort)
				if err := os.WriteFile(filepath.Join(wd, "Corefile"), []byte(corefile), 0o644); err != nil {
					t.Fatal(err)
				}
				p := harness.Start(t, "craftstore", wd, "Corefile")
				ready := fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort)
				harness.WaitReady(t, ready, p)
				a := harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}
				var res struct{ Records int }
				if code, err := a.Do("PUT", "/v1/zones/"+origin, text, &res); err != nil || code != http.StatusOK {
					t.Fatalf("expected 200 loading the zone, got %d %v", code, err)
				}
				addr := fmt.Sprintf("127.0.0.1:%d", dnsPort)
				if r, err := harness.Query(addr, origin, dns.TypeSOA); err != nil || r.Rcode != dns.RcodeSuccess {
					t.Fatalf("expected the zone served, got %v %v", r, err)
				}
				start := time.Now()
				dnsdiff.Compare(t, nsd, addr, queries)
				t.Logf("%s: %d records, %d queries compared with NSD in %v", mode, res.Records, len(queries), time.Since(start).Round(time.Millisecond))
				if mode != "memory" {
					if err := p.Signal(syscall.SIGTERM); err != nil {
						t.Fatal(err)
					}
					if _, err := p.Wait(30 * time.Second); err != nil {
						t.Fatal(err)
					}
					p.Restart()
					harness.WaitReady(t, ready, p)
					dnsdiff.Compare(t, nsd, addr, queries)
				}
			})
		}
	}
}
