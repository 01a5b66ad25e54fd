package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/integration/harness"
)

// TestPolicyGeo: rules by geo read CoreDNS's geoip plugin (its metadata),
// which looks the ECS address up in a MaxMind database: CoreDNS's own test
// database, which places 81.2.69.142 in Cambridge (EU, GB, ENG and CAM).
func TestPolicyGeo(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	db := filepath.Join(strings.TrimSpace(string(out)), "github.com/coredns/coredns@v1.15.0/plugin/geoip/testdata/GeoLite2-City.mmdb")
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("CoreDNS's test database: %v (go mod download github.com/coredns/coredns)", err)
	}
	wd := harness.Workdir(t)
	dnsPort, apiPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
	writeFile(t, filepath.Join(wd, "geo.Corefile"), fmt.Sprintf(`pol.test:%d {
    bind 127.0.0.1
    metadata
    geoip %s {
        edns-subnet
    }
    craftstore {
        data data/geo
        api 127.0.0.1:%d
    }
    ready 127.0.0.1:%d
    errors
}
`, dnsPort, db, apiPort, readyPort))
	p := harness.Start(t, "geo", wd, "geo.Corefile")
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), p)
	a := harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}
	putZone(t, a, "pol.test.", policyTestZone)
	body := `{"pools": {"cam": {"values": [{"value": "192.0.2.44"}]}, "gb": {"values": [{"value": "192.0.2.45"}]},
		"na": {"values": [{"value": "192.0.2.1"}]}, "main": {"values": [{"value": "192.0.2.99"}]}},
		"rules": [{"geos": ["EU-GB-CAM"], "pool": "cam"}, {"geos": ["NA"], "pool": "na"}, {"geos": ["EU-GB"], "pool": "gb"}, {"pool": "main"}]}`
	var res string
	if code, err := a.Do("PUT", "/v1/zones/pol.test./policies/www/A", json.RawMessage(body), &res); err != nil || code != http.StatusOK {
		t.Fatalf("PUT policy: %d %v %s", code, err, res)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", dnsPort)
	for _, tc := range []struct {
		subnet, want string
		scope        int
	}{
		{"81.2.69.142/32", "192.0.2.44", 32}, // Cambridge: its subdivision's rule, first
		{"81.2.69.0/24", "192.0.2.99", 0},    // the database has the /32 alone: no geo
		{"192.0.2.0/24", "192.0.2.99", 0},
	} {
		c := split(t, addr, "www.pol.test.", tc.subnet, 5, tc.scope)
		if c[tc.want] != 5 {
			t.Errorf("ECS %s: expected %s, got %v", tc.subnet, tc.want, c)
		}
	}
}
