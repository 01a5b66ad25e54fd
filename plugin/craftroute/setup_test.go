package craftroute

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"

	"github.com/craftdns/craftdns/internal/certs"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
)

func TestSetup(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.key")
	if err := os.WriteFile(key, []byte(`key "update." {
	algorithm hmac-sha256;
	secret "9ATHUKEK1AtZp8igg3qMeaLM1Y2Q3iBGRyWOyERsKXY=";
};
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := caddy.NewTestController("dns", `craftroute example.org {
		shard b 127.0.0.1:1171 127.0.0.2
		shard a 127.0.0.1:1161
		shard_api a http://127.0.0.1:8161/
		key zone
		timeout 300ms
		down_for 2s
		probe 0
		partitions 1021
		load 1.5
		negative_cache 0
		max_zone_records 500
		max_change_records 20
		migrate_batch 500
		name_filters 16
		tsig `+key+`
		api 127.0.0.1:0
		shard_token s3cret
		router_key `+testSecret+`
		seed example.org zone.txt
	}`)
	cr, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cr.cfg
	if len(cfg.shards) != 2 || cfg.shards[0].Name != "b" || cfg.shards[0].Members[1].Addr != "127.0.0.2:53" {
		t.Errorf("shards: %+v", cfg.shards)
	}
	if got := cr.shard("a").APIs(); len(got) != 1 || got[0] != "http://127.0.0.1:8161" {
		t.Errorf("expected the shard API without a trailing slash, got %v", got)
	}
	if cfg.key != keyZone || cfg.timeout != 300*time.Millisecond || cfg.downFor != 2*time.Second || cfg.probe != 0 ||
		cfg.partitions != 1021 || cfg.load != 1.5 || cfg.negCache != 0 || cfg.maxZone != 500 || cfg.maxChange != 20 || cfg.batch != 500 || cfg.filterMiB != 16 || cr.filters.maxBytes != 16<<20 || cfg.shardToken != "s3cret" || cfg.seeds["example.org."] != "zone.txt" || cr.leases.key == nil {
		t.Errorf("config: %+v", cfg)
	}
	for _, s := range cfg.shards { // timeout comes after the shards: every member has it
		for _, m := range s.Members {
			if m.timeout != 300*time.Millisecond || m.udp == nil || m.tcp == nil {
				t.Errorf("member %s of shard %s: timeout %v, sockets %v %v", m.Addr, s.Name, m.timeout, m.udp, m.tcp)
			}
		}
	}
	if cfg.keys["update."] == "" || cfg.keyAlgs["update."] != dns.HmacSHA256 {
		t.Errorf("keys: %v %v", cfg.keys, cfg.keyAlgs)
	}
	if cr.Zones[0] != "example.org." || cr.routes() == nil || cr.routes().ring == nil {
		t.Errorf("zones %v, routing %v", cr.Zones, cr.routes())
	}

	if cfg.mapMode != mapOff {
		t.Errorf("a router without shard_api for every shard routes by the map (%v)", cfg.mapMode)
	}

	// Defaults.
	cr, err = parse(caddy.NewTestController("dns", "craftroute {\nshard a 127.0.0.1:53\nrouter_key "+testSecret+"\n}"))
	if err != nil {
		t.Fatal(err)
	}
	if cr.cfg.mapMode != mapOff {
		t.Errorf("a router without member APIs routes by the map (%v)", cr.cfg.mapMode)
	}
	if cr.cfg.filterMiB != defaultFilterMiB {
		t.Errorf("name_filters %d by default, expected %d", cr.cfg.filterMiB, defaultFilterMiB)
	}
	if cr.cfg.batch != defaultMigrateBatch {
		t.Errorf("migrate_batch %d by default, expected %d", cr.cfg.batch, defaultMigrateBatch)
	}
	// The agreed map by default with every shard's API, or shard_seed; off
	// when the block says so.
	for conf, want := range map[string]mapMode{
		"shard a 127.0.0.1:53\nshard_api a http://127.0.0.1:8053":                mapOn,
		"shard_seed http://127.0.0.1:8053":                                       mapOn,
		"shard a 127.0.0.1:53\nshard_seed http://127.0.0.1:8053":                 mapOn,
		"shard a 127.0.0.1:53\nshard_api a http://127.0.0.1:8053\nshard_map off": mapOff,
	} {
		cr, err := parse(caddy.NewTestController("dns", "craftroute {\n"+conf+"\nrouter_key "+testSecret+"\n}"))
		if err != nil {
			t.Fatalf("%q: %v", conf, err)
		}
		if cr.cfg.mapMode != want {
			t.Errorf("%q: shard map %v, expected %v", conf, cr.cfg.mapMode, want)
		}
	}
	if cr.cfg.key != keyName || cr.cfg.timeout != defaultTimeout || cr.cfg.downFor != defaultDownFor ||
		cr.cfg.probe != defaultProbe || cr.cfg.partitions != shardmap.DefaultPartitions || cr.cfg.negCache != defaultNegCache || cr.cfg.slowOnly {
		t.Errorf("defaults: %+v", cr.cfg)
	}
	// Members asked over TLS: the system's CAs by default, a CA file, a
	// server name.
	ca := filepath.Join(dir, "ca.pem")
	authority, err := certs.NewAuthority("test CA", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, authority.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for conf, want := range map[string]struct {
		roots bool
		name  string
	}{
		"shard a tls://127.0.0.1 127.0.0.2":                                           {},
		"shard a tls://127.0.0.1 127.0.0.2\ntls " + ca:                                {roots: true},
		"shard a tls://127.0.0.1 127.0.0.2\ntls_servername m.example\ntls " + ca:      {roots: true, name: "m.example"},
		"shard a tls://127.0.0.1 127.0.0.2\ntls " + ca + "\ntls_servername m.example": {roots: true, name: "m.example"},
	} {
		cr, err := parse(caddy.NewTestController("dns", "craftroute {\n"+conf+"\nrouter_key "+testSecret+"\n}"))
		if err != nil {
			t.Fatalf("%q: %v", conf, err)
		}
		m, plain := cr.cfg.shards[0].Members[0], cr.cfg.shards[0].Members[1]
		if m.Addr != "tls://127.0.0.1:853" || m.dial != "127.0.0.1:853" || m.udp != nil || m.tls == nil || m.tcp.tls != m.tls {
			t.Errorf("%q: member %s (%s), udp %v, tls %v", conf, m.Addr, m.dial, m.udp, m.tls)
			continue
		}
		if (m.tls.RootCAs != nil) != want.roots || m.tls.ServerName != want.name || m.tls.ClientSessionCache == nil {
			t.Errorf("%q: CAs %v, server name %q, session cache %v", conf, m.tls.RootCAs != nil, m.tls.ServerName, m.tls.ClientSessionCache)
		}
		if plain.Addr != "127.0.0.2:53" || plain.udp == nil || plain.tls != nil || plain.tcp.tls != nil {
			t.Errorf("%q: the plain member %s: udp %v, tls %v", conf, plain.Addr, plain.udp, plain.tls)
		}
	}
	for conf, slow := range map[string]bool{"fast_path off": true, "fast_path on": false} {
		cr, err := parse(caddy.NewTestController("dns", "craftroute {\nshard a 127.0.0.1:53\n"+conf+"\nrouter_key "+testSecret+"\n}"))
		if err != nil || cr.cfg.slowOnly != slow {
			t.Errorf("%q: %v, slow only %v", conf, err, cr != nil && cr.cfg.slowOnly)
		}
	}
}

// TestSetupDNSSEC: the dnssec lines as craftstore reads them; a router
// signs only with the agreed map, and a bad key file fails the start.
func TestSetupDNSSEC(t *testing.T) {
	kek := filepath.Join(t.TempDir(), "kek")
	if err := dnssec.CreateKEK(kek); err != nil {
		t.Fatal(err)
	}
	const shards = "shard a 127.0.0.1:53\nshard_api a http://127.0.0.1:8053\nrouter_key " + testSecret + "\n"
	cr, err := parse(caddy.NewTestController("dns", "craftroute example.org {\n"+shards+"dnssec example.org\ndnssec_kek "+kek+"\ndnssec_zsk_rollover 20s 4s\n}"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cr.cfg.dnssec; cr.sec == nil || cr.negSigned == nil || !d.Signs("example.org.") || d.KEK == nil || d.ZSKLifetime != 20*time.Second || d.Algorithm != dns.ECDSAP256SHA256 {
		t.Errorf("dnssec: %+v", d)
	}
	for conf, want := range map[string]string{
		shards + "dnssec\n": "dnssec needs dnssec_kek",
		shards + "dnssec\ndnssec_kek /nonexistent/kek\n":               "/nonexistent/kek",
		shards + "dnssec other.org\ndnssec_kek " + kek + "\n":          "not routed by this block",
		shards + "shard_map off\ndnssec\ndnssec_kek " + kek + "\n":     "agreed shard map",
		shards + "dnssec_kek " + kek + "\n":                            "need a dnssec line",
		shards + "dnssec\ndnssec_kek " + kek + "\ndnssec_keys three\n": "ksk+zsk",
	} {
		_, err := parse(caddy.NewTestController("dns", "craftroute example.org {\n"+conf+"}"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: expected an error with %q, got %v", conf, want, err)
		}
	}
}

func TestSetupErrors(t *testing.T) {
	for _, tc := range []struct{ conf, want string }{
		{"craftroute {\n}", "at least one shard"},
		{"craftroute {\nshard a\n}", "at least one member"},
		{"craftroute {\nshard a 127.0.0.1\nshard a 127.0.0.2\n}", "twice"},
		{"craftroute {\nshard a nothere.example\n}", "not an IP"},
		{"craftroute {\nshard a tls://nothere.example\n}", "not an IP"},
		{"craftroute {\nshard a https://127.0.0.1\n}", "the only scheme"},
		{"craftroute {\nshard a tls://127.0.0.1\ntls a b c d\n}", "at most"},
		{"craftroute {\nshard a tls://127.0.0.1\ntls /nonexistent.pem\n}", "nonexistent.pem"},
		{"craftroute {\nshard a tls://127.0.0.1\ntls_servername\n}", "tls_servername needs"},
		{"craftroute {\nshard a 127.0.0.1\nshard_api b http://127.0.0.1:1\n}", "unknown shard"},
		{"craftroute {\nshard a 127.0.0.1\nshard_api a 127.0.0.1:1\n}", "not an http"},
		{"craftroute {\nshard a 127.0.0.1 127.0.0.2\nshard_api a http://127.0.0.1:1\n}", "1 URLs for 2 members"},
		{"craftroute {\nshard a 127.0.0.1\nkey owner\n}", "key must be"},
		{"craftroute {\nshard a 127.0.0.1\ntimeout 0s\n}", "positive"},
		{"craftroute {\nshard a 127.0.0.1\npartitions 100\n}", "at least 271"},
		{"craftroute {\nshard a 127.0.0.1\nload 1\n}", "above 1"},
		{"craftroute {\nshard a 127.0.0.1\nnegative_cache -1\n}", "negative"},
		{"craftroute {\nshard a 127.0.0.1\nmax_zone_records -1\n}", "negative"},
		{"craftroute {\nshard a 127.0.0.1\nmax_change_records -1\n}", "negative"},
		{"craftroute {\nshard a 127.0.0.1\nmigrate_batch 10\n}", "at least 100"},
		{"craftroute {\nshard a 127.0.0.1\nname_filters -1\n}", "must not be negative"},
		{"craftroute {\nshard a 127.0.0.1\nname_filters many\n}", "name_filters"},
		{"craftroute {\nshard a 127.0.0.1\nname_filters 100000\n}", "at most 65536"},
		{"craftroute {\nshard a 127.0.0.1\nmigrate_batch 20000\n}", "at most 10000"},
		{"craftroute {\nshard a 127.0.0.1\ntsig /nonexistent\n}", "no such file"},
		{"craftroute {\nshard a 127.0.0.1\napi 192.0.2.1:8053\n}", "needs a token"},
		{"craftroute {\nshard a 127.0.0.1\nbogus\n}", "unknown property"},
		{"craftroute {\nshard a 127.0.0.1\n}\ncraftroute {\nshard a 127.0.0.1\n}", "once"},
		{"craftroute {\nshard a 127.0.0.1\n}", "router_key is needed"},
		{"craftroute {\nshard a 127.0.0.1\nrouter_key short\n}", "at least 32 characters"},
		{"craftroute {\nshard a 127.0.0.1\nshard_map maybe\nrouter_key " + testSecret + "\n}", "on or off"},
		{"craftroute {\nshard a 127.0.0.1\nfast_path fast\nrouter_key " + testSecret + "\n}", "fast_path must be on or off"},
		{"craftroute {\nshard a 127.0.0.1\nshard_map on\nrouter_key " + testSecret + "\n}", "shard_map on needs"},
		{"craftroute {\nshard_seed http://127.0.0.1:1\nshard_map off\nrouter_key " + testSecret + "\n}", "shard_map off turns off"},
	} {
		_, err := parse(caddy.NewTestController("dns", tc.conf))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: expected an error with %q, got %v", tc.conf, tc.want, err)
		}
	}
}

// TestStartAPIFails: when the API cannot listen, start fails and undoes
// what it started (probes, member connections).
func TestStartAPIFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cr, err := parse(caddy.NewTestController("dns", "craftroute {\nshard a 127.0.0.1:53\nprobe 1s\nrouter_key "+testSecret+"\napi "+ln.Addr().String()+"\n}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cr.start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("expected the API's listen error, got %v", err)
	}
	if cr.stopProbes != nil || cr.api != nil {
		t.Errorf("expected the probes stopped and no API, got probes %v, api %v", cr.stopProbes != nil, cr.api)
	}
	if err := cr.stop(); err != nil { // the shutdown hook after a failed start
		t.Errorf("stop after a failed start: %v", err)
	}
}
