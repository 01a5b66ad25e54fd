package integration

import (
	"encoding/gob"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// externalDNSVersion is the external-dns release the test builds (its
// rfc2136 provider and its connector source), outside the product's
// go.mod.
const externalDNSVersion = "v0.20.0"

// externalDNS builds external-dns once per version into the user's cache
// directory (go install, with the Go toolchain at hand) and returns its
// path.
func externalDNS(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "craftdns-test-tools", "external-dns@"+externalDNSVersion)
	bin := filepath.Join(dir, "external-dns")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	began := time.Now()
	cmd := exec.Command("go", "install", "sigs.k8s.io/external-dns@"+externalDNSVersion)
	cmd.Dir = os.TempDir() // outside this module
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOTOOLCHAIN=local", "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building external-dns %s: %v\n%s", externalDNSVersion, err, tail(string(out), 4096))
	}
	t.Logf("built external-dns %s in %v", externalDNSVersion, time.Since(began).Round(time.Second))
	return bin
}

// edEndpoint is external-dns's endpoint.Endpoint as its connector source
// decodes it (gob matches fields by name).
type edEndpoint struct {
	DNSName          string
	Targets          []string
	RecordType       string
	SetIdentifier    string
	RecordTTL        int64
	Labels           map[string]string
	ProviderSpecific []struct{ Name, Value string }
}

// connector is a connector source for external-dns: every connection gets
// the desired endpoints, gob-encoded.
type connector struct {
	ln net.Listener
	mu sync.Mutex
	ep []*edEndpoint
}

func startConnector(t *testing.T) *connector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &connector{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			ep := c.ep
			c.mu.Unlock()
			gob.NewEncoder(conn).Encode(ep)
			conn.Close()
		}
	}()
	return c
}

func (c *connector) set(ep []*edEndpoint) {
	c.mu.Lock()
	c.ep = ep
	c.mu.Unlock()
}

// TestExternalDNSThroughRouter runs external-dns (its rfc2136 provider, as
// released, in its default batch size of 50 changes) against a router in
// each key mode: it lists the zone by TSIG-signed AXFR through the router,
// then creates, updates and deletes A and CNAME records with their TXT
// ownership records by RFC 2136 UPDATE through it (batches over both shards
// in key mode name: transactions); every change must be answered through
// the router, and after the deletes the zone is as it was.
func TestExternalDNSThroughRouter(t *testing.T) {
	const (
		byName = "edname.example."
		byZone = "edzone.example."
	)
	bin := externalDNS(t)
	wd := harness.Workdir(t)
	s := startSharded(t, wd, 2, 3, []string{byName, byZone},
		routerSpec{zones: []string{byName}, key: "name", transfer: true},
		routerSpec{zones: []string{byZone}, key: "zone", noMap: true, transfer: true})
	key, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/keys/update.key"))
	if err != nil {
		t.Fatal(err)
	}
	secret := regexp.MustCompile(`secret "([^"]+)"`).FindSubmatch(key)[1]
	src := startConnector(t)

	for i, origin := range []string{byName, byZone} {
		r := s.routers[i]
		t.Run(r.spec.key, func(t *testing.T) {
			text := fmt.Sprintf("$ORIGIN %s\n@ 3600 IN SOA ns1 hostmaster 1 7200 3600 1209600 60\n@ 3600 IN NS ns1\nns1 3600 IN A 192.0.2.53\nkeep 300 IN A 192.0.2.54\n", origin)
			putZone(t, r.client(), origin, text)
			before := zoneSet(t, r.addr(), origin)
			zone := strings.TrimSuffix(origin, ".")

			run := func(round string) {
				t.Helper()
				cmd := exec.Command(bin, "--once", "--source=connector", "--connector-source-server="+src.ln.Addr().String(),
					"--provider=rfc2136", "--rfc2136-host=127.0.0.1", fmt.Sprintf("--rfc2136-port=%d", r.dns),
					"--rfc2136-zone="+zone, "--rfc2136-tsig-keyname=update.", "--rfc2136-tsig-secret="+string(secret),
					"--rfc2136-tsig-secret-alg=hmac-sha256", "--rfc2136-tsig-axfr", "--registry=txt",
					"--txt-owner-id=craftdns", "--domain-filter="+zone, "--policy=sync", "--log-level=debug",
					"--managed-record-types=A", "--managed-record-types=CNAME")
				out, err := cmd.CombinedOutput()
				if err != nil || strings.Contains(string(out), "level=error") {
					t.Fatalf("external-dns, %s: %v\n%s", round, err, tail(string(out), 8192))
				}
				t.Logf("external-dns, %s: %d lines of log", round, strings.Count(string(out), "\n"))
			}
			// answers checks qtype at every name of want (name → rdata,
			// "" for none) through the router.
			answers := func(round string, qtype uint16, want map[string]string) {
				t.Helper()
				for name, rdata := range want {
					got := harness.Rdata(t, r.addr(), name, qtype)
					if rdata == "" && got != "NXDOMAIN" && got != "NODATA" {
						t.Errorf("%s: expected no %s at %s, got %q", round, dns.TypeToString[qtype], name, got)
					}
					if rdata != "" && got != rdata {
						t.Errorf("%s: expected %s %s %q, got %q", round, name, dns.TypeToString[qtype], rdata, got)
					}
				}
			}

			// Create: 60 hosts (more changes than one batch) and an alias,
			// each with its TXT ownership record.
			var desired []*edEndpoint
			hosts := map[string]string{}
			for j := 0; j < 60; j++ {
				name := fmt.Sprintf("h%d.%s", j, zone)
				ip := fmt.Sprintf("198.51.100.%d", j+1)
				desired = append(desired, &edEndpoint{DNSName: name, Targets: []string{ip}, RecordType: "A", RecordTTL: 300, Labels: map[string]string{}})
				hosts[name+"."] = ip
			}
			desired = append(desired,
				&edEndpoint{DNSName: "www." + zone, Targets: []string{"h0." + zone}, RecordType: "CNAME", RecordTTL: 300, Labels: map[string]string{}})
			src.set(desired)
			run("create")
			answers("create", dns.TypeA, hosts)
			answers("create", dns.TypeCNAME, map[string]string{"www." + origin: "h0." + origin})
			owned := 0
			for k := range zoneSet(t, r.addr(), origin) {
				if strings.Contains(k, "TXT") && strings.Contains(k, "external-dns/owner=craftdns") {
					owned++
				}
			}
			if owned < 61 {
				t.Errorf("create: expected a TXT ownership record for each of the 61 names, got %d", owned)
			}

			// Update: hosts move, the alias points elsewhere, ten hosts go.
			desired = desired[:0]
			for j := 0; j < 50; j++ {
				name := fmt.Sprintf("h%d.%s", j, zone)
				ip := fmt.Sprintf("203.0.113.%d", j+1)
				if j%2 == 0 {
					ip = fmt.Sprintf("198.51.100.%d", j+1)
				}
				desired = append(desired, &edEndpoint{DNSName: name, Targets: []string{ip}, RecordType: "A", RecordTTL: 300, Labels: map[string]string{}})
				hosts[name+"."] = ip
			}
			for j := 50; j < 60; j++ {
				hosts[fmt.Sprintf("h%d.%s.", j, zone)] = ""
			}
			desired = append(desired,
				&edEndpoint{DNSName: "www." + zone, Targets: []string{"h1." + zone}, RecordType: "CNAME", RecordTTL: 300, Labels: map[string]string{}})
			src.set(desired)
			run("update")
			answers("update", dns.TypeA, hosts)
			answers("update", dns.TypeCNAME, map[string]string{"www." + origin: "h1." + origin})

			// Delete everything external-dns owns: the zone is as before.
			src.set(nil)
			run("delete")
			after := zoneSet(t, r.addr(), origin)
			var extra, missing []string
			for k := range after {
				if !before[k] {
					extra = append(extra, k)
				}
			}
			for k := range before {
				if !after[k] {
					missing = append(missing, k)
				}
			}
			sort.Strings(extra)
			if len(extra) > 0 || len(missing) > 0 {
				t.Errorf("delete: expected the zone as before, got %d records more (%v) and %d fewer (%v)", len(extra), extra[:min(5, len(extra))], len(missing), missing)
			}
			answers("delete", dns.TypeA, map[string]string{"h0." + origin: "", "keep." + origin: "192.0.2.54"})
		})
	}
}

// zoneSet returns the records of origin (SOA aside, by rrKey) as an AXFR
// from addr has them.
func zoneSet(t *testing.T, addr, origin string) map[string]bool {
	t.Helper()
	rrs, err := axfrIn(addr, origin)
	if err != nil {
		t.Fatalf("AXFR of %s from %s: %v", origin, addr, err)
	}
	out := map[string]bool{}
	for _, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeSOA {
			out[rrKey(rr)] = true
		}
	}
	return out
}
