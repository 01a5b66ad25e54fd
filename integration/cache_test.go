package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// TestCacheInFront: with CoreDNS's cache plugin in front of craftstore, a
// write is read back at once, also when the name's absence was asked (and
// would have been cached) just before: craftstore's zones bypass the cache.
func TestCacheInFront(t *testing.T) {
	wd := harness.Workdir(t)
	dnsPort, apiPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
	corefile := fmt.Sprintf(`example.org:%d {
    bind 127.0.0.1
    cache 300
    craftstore {
        data data
        seed example.org Corefile.examples/zones/example.org.zone
        api 127.0.0.1:%d
    }
    ready 127.0.0.1:%d {
        monitor continuously
    }
}
`, dnsPort, apiPort, readyPort)
	if err := os.WriteFile(filepath.Join(wd, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	p := harness.Start(t, "member", wd, "Corefile")
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), p)
	addr := fmt.Sprintf("127.0.0.1:%d", dnsPort)
	a := harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("cached%d.example.org.", i)
		if r, err := harness.Query(addr, name, dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
			t.Fatalf("expected NXDOMAIN for %s before the write, got %v %v", name, r, err)
		}
		if code, err := a.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.77"}}, nil); err != nil || code != http.StatusOK {
			t.Fatalf("expected 200 writing %s, got %d %v", name, code, err)
		}
		if !harness.HasA(addr, name, "192.0.2.77") {
			r, _ := harness.Query(addr, name, dns.TypeA)
			t.Fatalf("expected %s right after the write, through the cache, got %v", name, r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
