package craftroute

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/zoneapi"
)

// waitFor polls cond every 20ms, at most 500 times.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

func TestSeedAndDiscover(t *testing.T) {
	c, ff, _ := apiRouter(t, keyName, 3, "")
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "example.org.zone")
	if err := os.WriteFile(seedFile, []byte(splitZone()), 0o644); err != nil {
		t.Fatal(err)
	}
	presentFile := filepath.Join(dir, "present.net.zone")
	if err := os.WriteFile(presentFile, []byte("@ 300 IN SOA ns h 1 2 3 4 5\n@ 300 IN NS ns\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.cfg.seeds = map[string]string{"example.org.": seedFile, "present.net.": presentFile}
	// A zone some shard holds already is not seeded; one only s1 holds is
	// discovered.
	for _, z := range []struct{ shard, origin string }{{"s0", "present.net."}, {"s1", "other.com."}} {
		rrs, err := zoneapi.ParseZone(z.origin, "@ 300 IN SOA ns h 7 2 3 4 5\n@ 300 IN NS ns\n")
		if err != nil {
			t.Fatal(err)
		}
		ff[z.shard].zones[z.origin] = rrs
	}
	// The shards' APIs do not answer at first.
	ff["s2"].setFail("GET", http.StatusServiceUnavailable)

	stop := c.startBackground()
	defer stop()
	waitFor(t, "a zone list attempt on s2", func() bool { return len(ff["s2"].requests("GET")) > 0 })
	for name, f := range ff {
		if n := len(f.requests("PUT")); n != 0 {
			t.Errorf("shard %s got %d PUTs while s2 did not answer", name, n)
		}
	}
	waitFor(t, "other.com. known from the shards that answered", func() bool {
		return c.zones.longest("www.other.com.") == "other.com."
	})

	ff["s2"].setFail("GET", 0)
	waitFor(t, "the seed on every shard", func() bool {
		for _, f := range ff {
			if f.zone(splitOrigin) == nil {
				return false
			}
		}
		return true
	})
	rrs, _ := zoneapi.ParseZone(splitOrigin, splitZone())
	for s, part := range c.split(splitOrigin, rrs) {
		if got := len(ff[s.Name].zone(splitOrigin)); got != len(part) {
			t.Errorf("shard %s: expected %d records, got %d", s.Name, len(part), got)
		}
	}
	for name, f := range ff {
		for _, r := range f.requests("PUT") {
			if r.path == "/v1/zones/present.net." {
				t.Errorf("shard %s: present.net. seeded although s0 holds it", name)
			}
		}
	}
	if got := c.zones.longest("www.present.net."); got != "present.net." {
		t.Errorf("expected present.net. known, got %q", got)
	}
}

func TestSeedZoneMode(t *testing.T) {
	c, ff, _ := apiRouter(t, keyZone, 3, "")
	seedFile := filepath.Join(t.TempDir(), "zone")
	if err := os.WriteFile(seedFile, []byte(splitZone()), 0o644); err != nil {
		t.Fatal(err)
	}
	c.cfg.seeds = map[string]string{"example.org.": seedFile}
	stop := c.startBackground()
	defer stop()
	s := c.zoneShard(splitOrigin)
	waitFor(t, "the seed", func() bool { return ff[s.Name].zone(splitOrigin) != nil })
	for name, f := range ff {
		if name != s.Name && f.zone(splitOrigin) != nil {
			t.Errorf("zone mode: seed also on shard %s", name)
		}
	}
}

func TestRefreshZonesReplaces(t *testing.T) {
	c, ff, _ := apiRouter(t, keyZone, 2, "")
	rrs, err := zoneapi.ParseZone("kept.net.", "@ 300 IN SOA ns h 1 2 3 4 5\n@ 300 IN NS ns\n")
	if err != nil {
		t.Fatal(err)
	}
	c.zones.add("gone.net.")
	ff["s0"].zones["kept.net."] = rrs
	sc := newShardClient(c)
	defer sc.close()
	if c.refreshZones(t.Context(), sc) == nil {
		t.Fatal("expected every shard to answer")
	}
	if c.zones.longest("a.gone.net.") != "" {
		t.Errorf("expected gone.net. forgotten once no shard lists it")
	}
	if c.zones.longest("a.kept.net.") != "kept.net." || c.zones.longest("a.example.org.") != splitOrigin {
		t.Errorf("expected kept.net. and the fixed zone known, got %v", c.zones.list())
	}
}
