package craftstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"

	"github.com/craftdns/craftdns/internal/dnssec"

	"github.com/miekg/dns"
)

func TestParse(t *testing.T) {
	kek := filepath.Join(t.TempDir(), "kek")
	if err := dnssec.CreateKEK(kek); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		input   string
		wantErr string
		check   func(t *testing.T, c *Craftstore)
	}{
		{input: `craftstore {
			data /tmp/x
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.id != 1 || c.cfg.raft != "127.0.0.1:0" || len(c.cfg.peers) != 1 || c.cfg.cluster != "craftdns" {
				t.Errorf("expected single-member defaults, got %+v", c.cfg)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			stale refuse
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.stale != "refuse" {
				t.Errorf("expected stale refuse, got %q", c.cfg.stale)
			}
		}},
		{input: `craftstore {
			data /tmp/x
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.stale != "serve" {
				t.Errorf("expected stale serve by default, got %q", c.cfg.stale)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			router_key 0123456789abcdef0123456789abcdef
			max_zones 3
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.routerKey != "0123456789abcdef0123456789abcdef" || c.cfg.maxZones != 3 {
				t.Errorf("expected the router key and max_zones 3, got %q %d", c.cfg.routerKey, c.cfg.maxZones)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			stale maybe
		}`, wantErr: "stale must be serve or refuse"},
		{input: `craftstore {
			data /tmp/x
			memory paged 1000
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.paged != 1000 {
				t.Errorf("memory paged 1000: cache %d", c.cfg.paged)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			memory paged
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.paged != defaultPagedCache {
				t.Errorf("memory paged: cache %d, expected %d", c.cfg.paged, defaultPagedCache)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			memory memory
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.paged != 0 {
				t.Errorf("memory memory: cache %d", c.cfg.paged)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			memory paged lots
		}`, wantErr: `memory paged: the cache "lots" must be a number of names, at least 64`},
		{input: `craftstore {
			data /tmp/x
			memory paged 10
		}`, wantErr: `memory paged: the cache "10" must be a number of names, at least 64`},
		{input: `craftstore {
			data /tmp/x
			memory disk
		}`, wantErr: `memory takes memory, or paged`},
		{input: `craftstore {
			data /tmp/x
			gc_headroom 40
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.headroom != 40 {
				t.Errorf("gc_headroom 40: %d", c.cfg.headroom)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			gc_headroom 100
			gc_headroom off
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.headroom != 0 {
				t.Errorf("gc_headroom off: %d", c.cfg.headroom)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			gc_headroom 2
		}`, wantErr: `gc_headroom "2": a percent from 5 to 100, or off`},
		{input: `craftstore {
			data /tmp/x
			gc_headroom lots
		}`, wantErr: `gc_headroom "lots": a percent from 5 to 100, or off`},
		{input: `craftstore {
			data /tmp/x
			raft_tls cert.pem key.pem
		}`, wantErr: "raft_tls needs a certificate, its key and the CA"},
		{input: `craftstore {
			data /tmp/x
			raft_tls /nonexistent/cert.pem /nonexistent/key.pem /nonexistent/ca.pem
		}`, wantErr: "raft_tls: certificate: open /nonexistent/cert.pem"},
		{input: `craftstore {
			data /tmp/x
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.headroom != 0 {
				t.Errorf("gc_headroom %d by default, expected off", c.cfg.headroom)
			}
			if c.cfg.maxZone != 1_000_000 || c.cfg.maxChange != 10_000 || c.cfg.maxZones != 10_000 || c.cfg.routerKey != "" {
				t.Errorf("expected max_zone_records 1000000, max_change_records 10000, max_zones 10000 and no router key by default, got %d %d %d %q",
					c.cfg.maxZone, c.cfg.maxChange, c.cfg.maxZones, c.cfg.routerKey)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			max_zone_records 0
			max_change_records 50
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.maxZone != 0 || c.cfg.maxChange != 50 {
				t.Errorf("expected max_zone_records 0 (no limit) and max_change_records 50, got %d %d", c.cfg.maxZone, c.cfg.maxChange)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			max_change_records x
		}`, wantErr: "not an integer"},
		{input: `craftstore {
			data /tmp/x
			max_zone_records -5
		}`, wantErr: "negative"},
		{input: `craftstore example.org {
			id 2
			data /tmp/x
			peer 1 127.0.0.1:7071
			peer 2 127.0.0.1:7072
			peer 3 127.0.0.1:7073
			api 127.0.0.1:8062
			snapshot 500
			timeout 2s
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.raft != "127.0.0.1:7072" || len(c.cfg.peers) != 3 || c.cfg.snapshot != 500 || c.Zones[0] != "example.org." {
				t.Errorf("expected the raft address taken from peer 2, got %+v", c.cfg)
			}
		}},
		{input: `craftstore {
			id 4
			data /tmp/x
			raft 127.0.0.1:7074
			join
		}`, check: func(t *testing.T, c *Craftstore) {
			if !c.cfg.join || len(c.cfg.peers) != 0 {
				t.Errorf("expected a joiner without initial peers, got %+v", c.cfg)
			}
		}},
		// One Corefile for a StatefulSet: the id from the pod's name, the
		// initial members start the group, the others join it.
		{input: `craftstore {
			id ordinal craftdns-a-1
			data /tmp/x
			raft craftdns-a-1.craftdns-a:7000
			raft_listen :7000
			peer 1 craftdns-a-0.craftdns-a:7000
			peer 2 craftdns-a-1.craftdns-a:7000
			peer 3 craftdns-a-2.craftdns-a:7000
			join http://craftdns-a-0.craftdns-a:8053 https://craftdns-a:8053/
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.id != 2 || c.cfg.join || len(c.cfg.peers) != 3 || c.cfg.listen != ":7000" || c.cfg.raft != "craftdns-a-1.craftdns-a:7000" {
				t.Errorf("expected initial member 2 listening on :7000, got %+v", c.cfg)
			}
		}},
		{input: `craftstore {
			id ordinal craftdns-a-3
			data /tmp/x
			raft craftdns-a-3.craftdns-a:7000
			peer 1 craftdns-a-0.craftdns-a:7000
			peer 2 craftdns-a-1.craftdns-a:7000
			peer 3 craftdns-a-2.craftdns-a:7000
			join http://craftdns-a-0.craftdns-a:8053
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.id != 4 || !c.cfg.join || len(c.cfg.joinURLs) != 1 || c.cfg.listen != c.cfg.raft {
				t.Errorf("expected member 4 to join, listening where it is reached, got %+v", c.cfg)
			}
		}},
		{input: `craftstore {
			id ordinal craftdns-b-0
			data /tmp/x
			statefulset craftdns-b
		}`, check: func(t *testing.T, c *Craftstore) {
			if c.cfg.stateful == nil || c.cfg.stateful.name != "craftdns-b" || c.cfg.stateful.account != serviceAccountDir || !c.cfg.byOrdinal || c.cfg.id != 1 {
				t.Errorf("expected StatefulSet craftdns-b with the pod's service account, ordinal 0, got %+v", c.cfg)
			}
		}},
		{input: `craftstore {
			id 3
			data /tmp/x
			statefulset craftdns-b
		}`, wantErr: "id ordinal"},
		{input: `craftstore {
			id ordinal craftdns
			data /tmp/x
		}`, wantErr: "does not end in -NUMBER"},
		{input: `craftstore {
			id ordinal craftdns-a-01
			data /tmp/x
		}`, wantErr: "does not end in -NUMBER"},
		{input: `craftstore {
			id 4
			data /tmp/x
			raft 127.0.0.1:7074
			join craftdns-a-0:8053
		}`, wantErr: "not the base URL"},
		{input: `craftstore {
			data /tmp/x
			raft 127.0.0.1:7074
			raft_listen 7000
		}`, wantErr: "raft_listen address"},
		{input: `craftstore`, wantErr: "data directory"},
		{input: `craftstore {
			data /tmp/x
			id 0
		}`, wantErr: "positive integer"},
		{input: `craftstore {
			data /tmp/x
			bogus 1
		}`, wantErr: "unknown property"},
		{input: `craftstore {
			data /tmp/x
			peer 1 127.0.0.1:7071
			peer 2 127.0.0.1:7072
			id 3
		}`, wantErr: "needs its Raft address"},
		{input: `craftstore {
			data /tmp/x
			api 0.0.0.0:8053
		}`, wantErr: "needs a token"},
		{input: `craftstore {
			data /tmp/x
			router_key short
		}`, wantErr: "at least 32 characters"},
		{input: `craftstore {
			data /tmp/x
			token change-me-before-applying
		}`, wantErr: "placeholder"},
		{input: `craftstore {
			data /tmp/x
			seed example.net /nonexistent
		}`, wantErr: "not served"},
		{input: `craftstore {
			data /tmp/x
			seed example.org /nonexistent
		}`, wantErr: "seed zone file"},
		{input: `craftstore {
			data /tmp/x
			timeout -1s
		}`, wantErr: "positive"},
		{input: `craftstore {
			data /tmp/x
			dnssec
		}`, wantErr: "dnssec_kek FILE"},
		{input: `craftstore {
			data /tmp/x
			dnssec_kek /nonexistent/kek
		}`, wantErr: "need a dnssec line"},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek /nonexistent/kek
		}`, wantErr: "/nonexistent/kek"},
		{input: `craftstore {
			data /tmp/x
			dnssec example.net
			dnssec_kek ` + kek + `
		}`, wantErr: "not served"},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
			dnssec_algorithm RSASHA256
		}`, wantErr: "ECDSAP256SHA256 or ED25519"},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
			dnssec_keys three
		}`, wantErr: "ksk+zsk"},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
			dnssec_zsk_rollover 10h 6h
		}`, wantErr: "more than twice the wait"},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
			dnssec_zsk_rollover soon
		}`, wantErr: "LIFETIME WAIT"},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
			dnssec_ksk_rollover 8760h
		}`, wantErr: "parent zone's servers"},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
			dnssec_ksk_rollover 8760h ns.example.net
		}`, wantErr: "not an IP address"},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
			dnssec_ksk_rollover 8760h 192.0.2.1 [2001:db8::1]:5353
		}`, check: func(t *testing.T, c *Craftstore) {
			if d := c.cfg.dnssec; d.KSKLifetime != 8760*time.Hour || strings.Join(d.Parents, " ") != "192.0.2.1:53 [2001:db8::1]:5353" {
				t.Errorf("dnssec_ksk_rollover: %v %v", d.KSKLifetime, d.Parents)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
			dnssec_zsk_rollover 20s 4s
		}`, check: func(t *testing.T, c *Craftstore) {
			if d := c.cfg.dnssec; d.ZSKLifetime != 20*time.Second || d.RolloverWait != 4*time.Second {
				t.Errorf("dnssec_zsk_rollover: %v %v", d.ZSKLifetime, d.RolloverWait)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			dnssec
			dnssec_kek ` + kek + `
		}`, check: func(t *testing.T, c *Craftstore) {
			d := c.cfg.dnssec
			if !d.On || d.Zones != nil || d.KEK == nil || d.Algorithm != dns.ECDSAP256SHA256 || d.CSK || !d.Signs("example.org.") ||
				d.ZSKLifetime != dnssec.DefaultZSKLifetime || d.RolloverWait != dnssec.DefaultRolloverWait {
				t.Errorf("dnssec defaults: %+v", d)
			}
		}},
		{input: `craftstore {
			data /tmp/x
			dnssec Example.ORG
			dnssec_kek ` + kek + `
			dnssec_algorithm ed25519
			dnssec_keys csk
		}`, check: func(t *testing.T, c *Craftstore) {
			d := c.cfg.dnssec
			if !d.On || len(d.Zones) != 1 || !d.Signs("example.org.") || d.Signs("other.org.") || d.Algorithm != dns.ED25519 || !d.CSK {
				t.Errorf("dnssec: %+v", d)
			}
		}},
	}
	for i, tc := range tests {
		c := caddy.NewTestController("dns", tc.input)
		c.ServerBlockKeys = []string{"example.org."}
		cs, err := parse(c)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("test %d: expected error containing %q, got %v", i, tc.wantErr, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("test %d: expected no error, got %v", i, err)
			continue
		}
		tc.check(t, cs)
	}
}

// TestParseRoot: relative data and seed paths are resolved against the
// root directive, as the file plugin does.
func TestParseRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "zones"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "zones", "example.org.zone"), []byte(partitionZone), 0o644); err != nil {
		t.Fatal(err)
	}
	c := caddy.NewTestController("dns", `craftstore example.org {
		data data/m1
		seed example.org zones/example.org.zone
	}`)
	dnsserver.GetConfig(c).Root = root
	cs, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	if cs.cfg.dir != filepath.Join(root, "data/m1") || cs.cfg.seeds["example.org."].file != filepath.Join(root, "zones/example.org.zone") {
		t.Errorf("expected paths under the root %s, got %q and %+v", root, cs.cfg.dir, cs.cfg.seeds)
	}
}
